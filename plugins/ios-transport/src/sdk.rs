//! The sdk peer's identity (written by its plugin's engineer).
