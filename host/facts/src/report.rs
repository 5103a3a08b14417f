//! Evidence reports: render one evidence archive (`aab.evidence-archive/v1`
//! or `/v2`) as a single self-contained HTML file a person can read — the
//! verification verdict, the timeline of records, recorded payloads (PNG
//! screenshots inline as `data:` URIs, JSON documents as escaped excerpts) —
//! with every part that fails its checks marked.
//!
//! An archive is hostile input: every file is read with a size cap and without
//! following symlinks, every string is HTML-escaped (nothing from a record is
//! ever emitted as markup), excerpts are bounded, and only a payload that
//! matches its recorded sha256 and looks like a PNG is inlined as an image.
//! The report carries no script and loads nothing: inline CSS only.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::archive::{self, MANIFEST_FILE, MAX_MANIFEST_BYTES, MAX_PAYLOAD_BYTES, MAX_RECORDS, MAX_RECORDS_BYTES, RECORDS_FILE};
use crate::canonical::{self, is_sha256_hex};
use crate::error::FactError;
use crate::evidence::record_checksum;
use crate::fsutil::{self, NoFollowError};

/// Largest pretty-printed record shown in full (longer ones are cut, and say so).
const MAX_RECORD_EXCERPT: usize = 32 * 1024;
/// Largest excerpt of one recorded JSON document.
const MAX_DOCUMENT_EXCERPT: usize = 16 * 1024;
/// Largest one-line summary of a record.
const MAX_SUMMARY: usize = 400;
/// Screenshot bytes inlined in one report; later ones are listed, not inlined.
const MAX_INLINE_IMAGE_BYTES: usize = 32 * 1024 * 1024;
/// Text (excerpts) one report holds besides images; later excerpts are omitted.
const MAX_TEXT_BYTES: usize = 48 * 1024 * 1024;
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// What `render` wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderReport {
    pub output_file: PathBuf,
    pub bytes: usize,
    /// `verified` or `failed`.
    pub integrity: &'static str,
    pub failure: Option<Value>,
    pub manifest_checked: bool,
    pub record_count: usize,
    pub marked_records: usize,
    pub marked_payloads: usize,
    pub inlined_images: usize,
}

impl RenderReport {
    pub fn to_json(&self) -> Value {
        json!({
            "ok": true,
            "outputFile": self.output_file.display().to_string(),
            "bytes": self.bytes,
            "integrity": self.integrity,
            "verificationError": self.failure,
            "manifestChecked": self.manifest_checked,
            "recordCount": self.record_count,
            "markedRecords": self.marked_records,
            "markedPayloads": self.marked_payloads,
            "inlinedImages": self.inlined_images,
        })
    }
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than newline/tab would make the text unreadable.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// `s` cut to at most `max` bytes on a char boundary, with a note when cut.
fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n… [cut: {} of {} bytes shown]", &s[..end], end, s.len())
}

/// `ms` since the epoch as `YYYY-MM-DD HH:MM:SS.mmm UTC`.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03} UTC", rem / 3600, rem % 3600 / 60, rem % 60, ms % 1000)
}

fn read(dir: &Path, name: &str, max: u64) -> Result<Vec<u8>, String> {
    fsutil::read_regular_no_follow(&dir.join(name), max).map_err(|e| match e {
        NoFollowError::Missing => "missing".to_string(),
        NoFollowError::NotRegular => "not a regular file (symlinks are refused)".to_string(),
        NoFollowError::TooLarge(n) => format!("{n} bytes, over the {max} byte limit"),
        NoFollowError::Io(e) => format!("unreadable: {e}"),
    })
}

/// The fields that say what a record is about, on one line.
fn summary(payload: &Value) -> String {
    const SKIP: &[&str] = &["checksum", "persisted", "schemaVersion", "namespace", "operationId", "evidenceId", "kind", "directory", "sha256", "originalSha256", "dataSha256"];
    let mut parts = Vec::new();
    if let Value::Object(m) = payload {
        for (k, v) in m {
            if SKIP.contains(&k.as_str()) {
                continue;
            }
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(_) | Value::Bool(_) => v.to_string(),
                Value::Object(_) | Value::Array(_) => {
                    let t = v.to_string();
                    if t.len() > 120 { format!("{}…", &t[..t.char_indices().take_while(|(i, _)| *i < 120).last().map_or(0, |(i, c)| i + c.len_utf8())]) } else { t }
                }
                Value::Null => continue,
            };
            parts.push(format!("{k}={text}"));
        }
    }
    bounded(&parts.join("  "), MAX_SUMMARY)
}

struct Mark {
    label: String,
    why: String,
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1b1b;background:#fafafa}\
h1{font-size:22px}h2{font-size:18px;margin-top:28px}\
.verdict{padding:12px 16px;border-radius:6px;font-weight:600;margin:12px 0}\
.ok{background:#e3f5e5;border:2px solid #2e7d32}.fail{background:#fde7e7;border:2px solid #c62828}\
.note{background:#fff6db;border:2px solid #b58900}\
table.meta td{padding:2px 10px 2px 0;vertical-align:top}\
ol.timeline{list-style:none;padding:0}\
ol.timeline>li{background:#fff;border:1px solid #ddd;border-left:6px solid #1565c0;margin:8px 0;padding:8px 12px;border-radius:4px}\
ol.timeline>li.bad{border-left-color:#c62828;background:#fff3f3}\
.seq{color:#666;font-family:monospace}.kind{font-weight:700;margin:0 8px}.time{color:#444}\
.id{font-family:monospace;color:#555;font-size:12px;word-break:break-all}\
.sum{font-family:monospace;font-size:12px;white-space:pre-wrap;word-break:break-all;margin:4px 0}\
.mark{display:inline-block;background:#c62828;color:#fff;font-weight:700;padding:1px 8px;border-radius:3px;margin:2px 6px 2px 0}\
pre{background:#f3f3f3;padding:8px;overflow:auto;max-height:480px;white-space:pre-wrap;word-break:break-all;font-size:12px}\
img.shot{max-width:100%;border:1px solid #999;display:block;margin:6px 0}";

/// Render `archive_dir` into a new HTML file at `output_file`.
///
/// The existing offline verification ([`archive::verify`]) decides the
/// verdict; without `manifest_sha256` the manifest is verified against its own
/// hash and the report says it was not checked against a known one. Records
/// and payloads that fail their own checks are marked individually.
///
/// Errors (before anything is written): `invalid_argument` (manifestSha256,
/// outputFile), `output_exists`, `invalid_archive_directory`,
/// `report_write_failed`.
pub fn render(archive_dir: &Path, manifest_sha256: Option<&str>, output_file: &Path) -> Result<RenderReport, FactError> {
    if let Some(h) = manifest_sha256
        && !is_sha256_hex(h)
    {
        return Err(FactError::invalid_argument("manifestSha256", "manifestSha256 must be 64 lowercase hex digits"));
    }
    let parent = match output_file.parent() {
        Some(p) if p.as_os_str().is_empty() => Path::new("."),
        Some(p) => p,
        None => return Err(FactError::invalid_argument("outputFile", "outputFile needs a parent directory")),
    };
    if output_file.file_name().is_none() {
        return Err(FactError::invalid_argument("outputFile", "outputFile must name a file"));
    }
    if !std::fs::metadata(parent).is_ok_and(|m| m.is_dir()) {
        return Err(FactError::invalid_argument("outputFile", format!("the parent of outputFile ({}) must be an existing directory", parent.display())));
    }
    // A report inside the archive would itself make the archive fail verification.
    if let (Ok(a), Ok(b)) = (archive_dir.canonicalize(), parent.canonicalize())
        && a == b
    {
        return Err(FactError::invalid_argument("outputFile", "outputFile must not be inside the archive directory"));
    }
    if std::fs::symlink_metadata(output_file).is_ok() {
        return Err(FactError::new("output_exists", format!("{} already exists; the report never replaces a file", output_file.display()))
            .with_details(json!({ "field": "outputFile" })));
    }
    if !std::fs::symlink_metadata(archive_dir).is_ok_and(|m| m.is_dir()) {
        return Err(FactError::new("invalid_archive_directory", format!("{} is not a real directory (symlinks are refused)", archive_dir.display()))
            .with_details(json!({ "field": "archiveDir" })));
    }

    let mut html = String::with_capacity(64 * 1024);
    let mut marked_payloads = 0usize;
    let mut inlined_images = 0usize;
    let mut image_bytes = 0usize;

    // The manifest and the verdict.
    let manifest_read = read(archive_dir, MANIFEST_FILE, MAX_MANIFEST_BYTES);
    let manifest: Value = manifest_read.as_ref().ok().and_then(|b| serde_json::from_slice(b).ok()).unwrap_or(Value::Null);
    let actual_manifest_sha = manifest_read.as_ref().ok().map(|b| canonical::sha256_hex(b));
    let verdict = match (&manifest_read, manifest_sha256) {
        (Err(why), _) => Err(json!({ "code": "invalid_archive_file", "message": format!("manifest.json: {why}"), "details": { "file": MANIFEST_FILE } })),
        (Ok(_), known) => {
            let against = known.map(str::to_string).or_else(|| actual_manifest_sha.clone()).unwrap_or_default();
            archive::verify(archive_dir, &against).map_err(|e| json!({ "code": e.code, "message": e.message, "details": e.details }))
        }
    };
    let failure = verdict.as_ref().err().cloned();
    let failing_id = failure.as_ref().and_then(|f| f["details"]["evidenceId"].as_str()).map(str::to_string);
    let failing_index = failure.as_ref().and_then(|f| f["details"]["index"].as_u64());
    let failing_file = failure.as_ref().and_then(|f| f["details"]["file"].as_str()).map(str::to_string);

    let title = format!(
        "Evidence report: {} operation {}",
        manifest["namespace"].as_str().unwrap_or("?"),
        manifest["operationId"].as_str().unwrap_or("?")
    );
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">\
<title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        esc(&title),
        esc(&title)
    );
    match &verdict {
        Ok(v) => {
            let _ = writeln!(
                html,
                "<div class=\"verdict ok\" id=\"verdict\">Verification: VERIFIED — {} records, sequence {}–{}, every checksum, binding and reference checked offline.</div>",
                v.record_count, v.first_global_seq, v.last_global_seq
            );
        }
        Err(f) => {
            let _ = writeln!(
                html,
                "<div class=\"verdict fail\" id=\"verdict\">Verification: FAILED — {} ({})</div>",
                esc(f["message"].as_str().unwrap_or("")),
                esc(f["code"].as_str().unwrap_or(""))
            );
            if !f["details"].is_null() {
                let _ = writeln!(html, "<pre>{}</pre>", esc(&bounded(&serde_json::to_string_pretty(&f["details"]).unwrap_or_default(), MAX_DOCUMENT_EXCERPT)));
            }
        }
    }
    match (manifest_sha256, &actual_manifest_sha) {
        (None, _) => html.push_str("<div class=\"verdict note\" id=\"manifest-check\">The manifest was not checked against a known manifest hash: anyone could have rewritten the whole archive consistently. Pass manifestSha256 (as reported by export) to check it.</div>\n"),
        (Some(k), Some(a)) if k == a => html.push_str("<div class=\"verdict ok\" id=\"manifest-check\">manifest.json matches the known manifest hash.</div>\n"),
        (Some(_), _) => html.push_str("<div class=\"verdict fail\" id=\"manifest-check\">manifest.json does NOT match the known manifest hash (tampered or replaced).</div>\n"),
    }
    html.push_str("<h2>Archive</h2>\n<table class=\"meta\">");
    let mut row = |k: &str, v: String| {
        let _ = write!(html, "<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(&v));
    };
    row("Archive directory", archive_dir.display().to_string());
    for f in ["schemaVersion", "namespace", "operationId", "recordCount", "firstGlobalSeq", "lastGlobalSeq"] {
        row(f, match &manifest[f] {
            Value::String(s) => s.clone(),
            Value::Null => "—".into(),
            v => v.to_string(),
        });
    }
    if let Some(ms) = manifest["exportedAtMs"].as_u64() {
        row("Exported at", utc(ms));
    }
    row("manifest.json sha256", actual_manifest_sha.clone().unwrap_or_else(|| "— (unreadable)".into()));
    if let Some(c) = manifest.get("coverage") {
        row("Reference closure", c["referenceClosure"].as_str().unwrap_or("—").to_string());
        row("External payloads", c["externalPayloads"].as_str().unwrap_or("—").to_string());
    }
    html.push_str("</table>\n");

    // Records.
    let records_read = read(archive_dir, RECORDS_FILE, MAX_RECORDS_BYTES);
    let facts: Result<Vec<Value>, String> = records_read.and_then(|b| {
        let want = manifest["records"]["sha256"].as_str();
        let got = canonical::sha256_hex(&b);
        let parsed: Vec<Value> = serde_json::from_slice(&b).map_err(|e| format!("not a JSON array: {e}"))?;
        if want.is_some() && want != Some(got.as_str()) {
            // Still shown: the marks below say which records changed.
            html.push_str("<div class=\"verdict fail\" id=\"records-check\">records.json differs from the size and sha256 its manifest pins (tampered).</div>\n");
        }
        Ok(parsed)
    });
    let mut marked_records = 0usize;
    let mut record_count = 0usize;
    html.push_str("<h2>Timeline</h2>\n");
    match facts {
        Err(why) => {
            let _ = writeln!(html, "<div class=\"verdict fail\">records.json cannot be shown: {}</div>", esc(&why));
        }
        Ok(facts) => {
            record_count = facts.len();
            let with_payloads = manifest["schemaVersion"].as_str() == Some(archive::ARCHIVE_SCHEMA_V2);
            html.push_str("<ol class=\"timeline\">\n");
            for (i, fact) in facts.iter().take(MAX_RECORDS).enumerate() {
                let p = &fact["payload"];
                let id = p["evidenceId"].as_str().unwrap_or("");
                let kind = p["kind"].as_str().unwrap_or("?");
                let mut marks: Vec<Mark> = Vec::new();
                if !p.is_object() {
                    marks.push(Mark { label: "MALFORMED".into(), why: "the record has no payload object".into() });
                } else if p["checksum"].as_str() != Some(record_checksum(p).as_str()) {
                    marks.push(Mark { label: "TAMPERED".into(), why: "the record does not match its own checksum".into() });
                }
                if failing_id.as_deref() == Some(id) && !id.is_empty() || failing_index == Some(i as u64) {
                    let f = failure.as_ref().expect("a failing id implies a failure");
                    marks.push(Mark {
                        label: "FAILS VERIFICATION".into(),
                        why: format!("{}: {}", f["code"].as_str().unwrap_or(""), f["message"].as_str().unwrap_or("")),
                    });
                }
                // The record's recorded payload (v2 archives).
                let mut payload_html = String::new();
                if kind == "attachment" && with_payloads {
                    let sha = p["sha256"].as_str().filter(|s| is_sha256_hex(s));
                    let png = p["payloadKind"].as_str() == Some("png") || p["file"].as_str().is_some_and(|f| f.ends_with(".png"));
                    match sha {
                        None => marks.push(Mark { label: "PAYLOAD UNKNOWN".into(), why: "the attachment names no valid sha256".into() }),
                        Some(sha) => {
                            let name = format!("payload-{sha}.{}", if png { "png" } else { "json" });
                            // Read one payload at a time (bounded), never all at once.
                            let got = read(archive_dir, &name, MAX_PAYLOAD_BYTES);
                            match &got {
                                Err(why) => {
                                    marked_payloads += 1;
                                    let label = if why == "missing" { "PAYLOAD MISSING" } else { "PAYLOAD UNREADABLE" };
                                    marks.push(Mark { label: label.into(), why: format!("{name}: {why}") });
                                }
                                Ok(bytes) if canonical::sha256_hex(bytes) != sha || p["bytes"].as_u64() != Some(bytes.len() as u64) => {
                                    marked_payloads += 1;
                                    marks.push(Mark { label: "PAYLOAD TAMPERED".into(), why: format!("{name} does not match its recorded size and sha256; not shown") });
                                }
                                Ok(bytes) if png => {
                                    let looks_png = bytes.starts_with(PNG_SIGNATURE) && bytes.len() >= 16 && &bytes[12..16] == b"IHDR";
                                    if !looks_png {
                                        marks.push(Mark { label: "NOT A PNG".into(), why: format!("{name} is not a PNG; not shown as an image") });
                                    } else if image_bytes + bytes.len() > MAX_INLINE_IMAGE_BYTES {
                                        let _ = write!(payload_html, "<p>Screenshot {} not inlined: the report's image budget is spent.</p>", esc(&name));
                                    } else {
                                        inlined_images += 1;
                                        image_bytes += bytes.len();
                                        let _ = write!(
                                            payload_html,
                                            "<img class=\"shot\" alt=\"screenshot {}\" src=\"data:image/png;base64,{}\">",
                                            esc(&name),
                                            base64::engine::general_purpose::STANDARD.encode(bytes)
                                        );
                                    }
                                }
                                Ok(_) if html.len().saturating_sub(image_bytes * 4 / 3) > MAX_TEXT_BYTES => {
                                    let _ = write!(payload_html, "<p>Recorded document {} not shown: the report's size budget is spent.</p>", esc(&name));
                                }
                                Ok(bytes) => {
                                    let text = String::from_utf8_lossy(bytes);
                                    let pretty = serde_json::from_str::<Value>(&text).ok().and_then(|v| serde_json::to_string_pretty(&v).ok()).unwrap_or_else(|| text.into_owned());
                                    let _ = write!(
                                        payload_html,
                                        "<details open><summary>Recorded document {} ({} bytes)</summary><pre class=\"doc\">{}</pre></details>",
                                        esc(&name),
                                        bytes.len(),
                                        esc(&bounded(&pretty, MAX_DOCUMENT_EXCERPT))
                                    );
                                }
                            }
                        }
                    }
                }
                if failing_file.as_deref().is_some_and(|f| p["sha256"].as_str().is_some_and(|s| f.contains(s))) && !marks.iter().any(|m| m.label.starts_with("PAYLOAD")) {
                    marks.push(Mark { label: "PAYLOAD FAILS VERIFICATION".into(), why: failing_file.clone().unwrap_or_default() });
                }
                if !marks.is_empty() {
                    marked_records += 1;
                }
                let time = fact["committedAtMs"].as_u64().map(utc).unwrap_or_else(|| "time unknown".into());
                let _ = write!(
                    html,
                    "<li class=\"{}\" data-kind=\"{}\"><span class=\"seq\">#{}</span><span class=\"kind\">{}</span><span class=\"time\">{}</span><div class=\"id\">{}</div>",
                    if marks.is_empty() { "rec" } else { "rec bad" },
                    esc(kind),
                    esc(&fact["globalSeq"].to_string()),
                    esc(kind),
                    esc(&time),
                    esc(id)
                );
                for m in &marks {
                    let _ = write!(html, "<div><span class=\"mark\">{}</span>{}</div>", esc(&m.label), esc(&m.why));
                }
                let _ = write!(html, "<div class=\"sum\">{}</div>", esc(&summary(p)));
                html.push_str(&payload_html);
                if html.len().saturating_sub(image_bytes * 4 / 3) > MAX_TEXT_BYTES {
                    html.push_str("<p>Full record not shown: the report's size budget is spent.</p></li>\n");
                } else {
                    let full = serde_json::to_string_pretty(p).unwrap_or_default();
                    let _ = writeln!(html, "<details><summary>Full record</summary><pre>{}</pre></details></li>", esc(&bounded(&full, MAX_RECORD_EXCERPT)));
                }
            }
            html.push_str("</ol>\n");
            if facts.len() > MAX_RECORDS {
                let _ = writeln!(html, "<p>Only the first {MAX_RECORDS} of {} records are shown.</p>", facts.len());
            }
        }
    }
    html.push_str("</body></html>\n");

    write_new_atomically(output_file, parent, html.as_bytes())
        .map_err(|e| FactError::io("report_write_failed", &format!("cannot write {}", output_file.display()), e))?;
    Ok(RenderReport {
        output_file: output_file.to_path_buf(),
        bytes: html.len(),
        integrity: if verdict.is_ok() { "verified" } else { "failed" },
        failure,
        manifest_checked: manifest_sha256.is_some(),
        record_count,
        marked_records,
        marked_payloads,
        inlined_images,
    })
}

/// Write a complete file next to `path`, then link it into place: the report
/// appears whole or not at all, and an existing path is never replaced (the
/// link fails if something appeared meanwhile).
fn write_new_atomically(path: &Path, parent: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("report");
    let tmp = parent.join(format!(".{name}.tmp-{}-{}", std::process::id(), canonical::sha256_hex(bytes).get(..12).unwrap_or("")));
    let _ = std::fs::remove_file(&tmp);
    fsutil::write_new_file(&tmp, bytes)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    linked?;
    fsutil::sync_dir(parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_bounds() {
        assert_eq!(esc("<script>alert(1)</script>&\"'"), "&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;&#39;");
        assert!(bounded(&"é".repeat(100), 11).starts_with("ééééé\n… [cut"));
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc(1_764_792_000_123), "2025-12-03 20:00:00.123 UTC");
    }

    #[test]
    fn refusals_come_before_any_write_and_garbage_archives_still_render() {
        let tmp = tempfile::tempdir().unwrap();
        let archive = tmp.path().join("a");
        std::fs::create_dir(&archive).unwrap();
        std::fs::write(archive.join(MANIFEST_FILE), b"{\"schemaVersion\": \"<b>x</b>\"}").unwrap();
        std::fs::write(archive.join(RECORDS_FILE), b"[{\"globalSeq\": 1, \"payload\": {\"kind\": \"<img src=x onerror=alert(1)>\", \"checksum\": \"0\"}}, 7]").unwrap();
        let code = |r: Result<RenderReport, FactError>| r.map(|_| ()).unwrap_err().code;
        assert_eq!(code(render(&archive, Some("XYZ"), &tmp.path().join("r.html"))), "invalid_argument");
        assert_eq!(code(render(&archive, None, &tmp.path().join("no/such/r.html"))), "invalid_argument");
        assert_eq!(code(render(&archive, None, &archive.join("r.html"))), "invalid_argument");
        assert_eq!(code(render(&tmp.path().join("missing"), None, &tmp.path().join("r.html"))), "invalid_archive_directory");
        std::fs::write(tmp.path().join("taken.html"), b"keep").unwrap();
        assert_eq!(code(render(&archive, None, &tmp.path().join("taken.html"))), "output_exists");
        assert_eq!(std::fs::read(tmp.path().join("taken.html")).unwrap(), b"keep");
        assert!(!tmp.path().join("r.html").exists());

        let out = render(&archive, None, &tmp.path().join("r.html")).expect("a report of a broken archive");
        assert_eq!((out.integrity, out.record_count, out.marked_records), ("failed", 2, 2));
        let html = std::fs::read_to_string(tmp.path().join("r.html")).unwrap();
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;") && !html.contains("<img src=x") && !html.contains("<b>x"), "{html}");
        // Only the report itself is left: no temp file.
        let names: Vec<String> = std::fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
    }
}
