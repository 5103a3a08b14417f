//! Freezing a script's source before dispatch: inline text is size-checked,
//! `sourcePath` is resolved against the caller's cwd and read once, so a file
//! changed after the check cannot change what runs.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::{ExtractError, Language, MAX_SOURCE_BYTES, MAX_SOURCE_CHARS, MAX_SOURCE_PATH_CHARS, ScriptSpec, codes};

/// A source as it will run.
pub(crate) struct Frozen {
    pub text: String,
    /// Shown in stacks and syntax errors.
    pub name: String,
    pub path: Option<PathBuf>,
}

pub(crate) fn freeze(spec: &ScriptSpec, cwd: &Path) -> Result<Frozen, ExtractError> {
    match (&spec.source, &spec.source_path) {
        (Some(text), None) => {
            if text.is_empty() {
                return Err(ExtractError::new(codes::INVALID_ARGUMENT, "`extract.source` is empty; it must define `main(ctx)`").with_field("extract.source"));
            }
            if let Some(problem) = size_problem(text) {
                return Err(ExtractError::new(codes::INVALID_ARGUMENT, format!("`extract.source` is {problem}")).with_field("extract.source"));
            }
            Ok(Frozen {
                text: text.clone(),
                name: inline_name(spec.language).to_string(),
                path: None,
            })
        }
        (None, Some(path)) => read_file(path, cwd),
        (Some(_), Some(_)) => {
            Err(ExtractError::new(codes::INVALID_ARGUMENT, "`extract` takes exactly one of `source` and `sourcePath`, got both").with_field("extract"))
        }
        (None, None) => Err(ExtractError::new(
            codes::INVALID_ARGUMENT,
            "a script extraction needs exactly one of `extract.source` and `extract.sourcePath`",
        )
        .with_field("extract.source")),
    }
}

fn inline_name(language: Language) -> &'static str {
    match language {
        Language::JavaScript => "extract.js",
        Language::Python => "extract.py",
    }
}

/// Why a source is too large, if it is.
fn size_problem(text: &str) -> Option<String> {
    if text.len() > MAX_SOURCE_BYTES {
        return Some(format!("{} bytes of UTF-8; the limit is {MAX_SOURCE_BYTES}", text.len()));
    }
    // UTF-8 never takes fewer bytes than UTF-16 code units, so this only matters if
    // the byte limit is ever raised above the character limit.
    let units = text.encode_utf16().count();
    (units > MAX_SOURCE_CHARS).then(|| format!("{units} characters long; the limit is {MAX_SOURCE_CHARS}"))
}

fn unavailable(path: &Path, reason: &str, message: String) -> ExtractError {
    ExtractError::new(codes::SOURCE_UNAVAILABLE, message)
        .with_field("extract.sourcePath")
        .with("path", path.display().to_string())
        .with("reason", reason)
}

fn read_file(given: &str, cwd: &Path) -> Result<Frozen, ExtractError> {
    if given.is_empty() || given.chars().count() > MAX_SOURCE_PATH_CHARS || given.contains('\0') {
        return Err(ExtractError::new(
            codes::INVALID_ARGUMENT,
            format!("`extract.sourcePath` must be a path of 1 to {MAX_SOURCE_PATH_CHARS} characters without NUL"),
        )
        .with_field("extract.sourcePath"));
    }
    let joined = cwd.join(given);
    let path = std::path::absolute(&joined).unwrap_or(joined);
    // O_NONBLOCK: opening a FIFO must not wait for a writer; the regular-file
    // check below then refuses it (and devices such as /dev/zero) before any read.
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path)
        .map_err(|e| unavailable(&path, "unreadable", format!("`extract.sourcePath` {} cannot be opened: {e}", path.display())))?;
    let meta = file
        .metadata()
        .map_err(|e| unavailable(&path, "unreadable", format!("`extract.sourcePath` {} cannot be inspected: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(unavailable(
            &path,
            "not_a_file",
            format!("`extract.sourcePath` {} is not a regular file", path.display()),
        ));
    }
    let mut bytes = Vec::with_capacity((meta.len() as usize).min(MAX_SOURCE_BYTES + 1));
    // Read one byte past the limit: the file may have grown since `metadata`.
    file.take(MAX_SOURCE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unavailable(&path, "unreadable", format!("`extract.sourcePath` {} cannot be read: {e}", path.display())))?;
    if bytes.len() > MAX_SOURCE_BYTES {
        return Err(unavailable(
            &path,
            "too_large",
            format!("`extract.sourcePath` {} is larger than {MAX_SOURCE_BYTES} bytes", path.display()),
        )
        .with("limitBytes", MAX_SOURCE_BYTES as u64));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        unavailable(
            &path,
            "not_utf8",
            format!(
                "`extract.sourcePath` {} is not UTF-8 text (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    if text.is_empty() {
        return Err(unavailable(
            &path,
            "empty",
            format!("`extract.sourcePath` {} is empty; it must define `main(ctx)`", path.display()),
        ));
    }
    if let Some(problem) = size_problem(&text) {
        return Err(unavailable(&path, "too_large", format!("`extract.sourcePath` {} is {problem}", path.display())));
    }
    let name = path.display().to_string();
    Ok(Frozen { text, name, path: Some(path) })
}
