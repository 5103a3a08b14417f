//! The Intent lifecycle status: one enum instead of strings, serialised (serde,
//! `Display`) to the same snake_case names the contract and evidence use.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Status {
    Created,
    Observing,
    WaitingForDecision,
    WaitingForObservation,
    DecisionCommitted,
    AutonomousDeciding,
    Paused,
    Finishing,
    Cancelling,
    // Terminal.
    Completed,
    Failed,
    Inconclusive,
    Cancelled,
    Timeout,
    Ambiguous,
    BlockedEvidenceStore,
    InterventionRequired,
}

impl Status {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Observing => "observing",
            Status::WaitingForDecision => "waiting_for_decision",
            Status::WaitingForObservation => "waiting_for_observation",
            Status::DecisionCommitted => "decision_committed",
            Status::AutonomousDeciding => "autonomous_deciding",
            Status::Paused => "paused",
            Status::Finishing => "finishing",
            Status::Cancelling => "cancelling",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Inconclusive => "inconclusive",
            Status::Cancelled => "cancelled",
            Status::Timeout => "timeout",
            Status::Ambiguous => "ambiguous",
            Status::BlockedEvidenceStore => "blocked_evidence_store",
            Status::InterventionRequired => "intervention_required",
        }
    }

    /// A settled outcome: never rewritten.
    pub(super) fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Completed | Status::Failed | Status::Inconclusive | Status::Cancelled | Status::Timeout | Status::Ambiguous | Status::BlockedEvidenceStore | Status::InterventionRequired
        )
    }

    /// Being stopped (the terminal outcome is on its way).
    pub(super) fn is_stopping(self) -> bool {
        matches!(self, Status::Cancelling | Status::Finishing)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Status;

    #[test]
    fn serialises_to_the_contract_names() {
        let all = [
            Status::Created, Status::Observing, Status::WaitingForDecision, Status::WaitingForObservation, Status::DecisionCommitted, Status::AutonomousDeciding,
            Status::Paused, Status::Finishing, Status::Cancelling, Status::Completed, Status::Failed, Status::Inconclusive, Status::Cancelled, Status::Timeout,
            Status::Ambiguous, Status::BlockedEvidenceStore, Status::InterventionRequired,
        ];
        for s in all {
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::Value::String(s.to_string()), "{s:?}");
        }
        let terminal: Vec<&str> = all.iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect();
        assert_eq!(terminal, ["completed", "failed", "inconclusive", "cancelled", "timeout", "ambiguous", "blocked_evidence_store", "intervention_required"]);
    }
}
