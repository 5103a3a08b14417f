//! Integration tests of aab-facts through its public API, real SQLite files,
//! real processes (`facts-writer`) and real archive directories.

mod support;

mod archive;
mod crash;
mod evidence;
mod redaction;
mod response_history;
mod store;
