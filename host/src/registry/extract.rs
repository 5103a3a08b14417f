//! Extraction applied to a command result after it completed (stub).
