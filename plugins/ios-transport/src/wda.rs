//! The wda peer's identity (written by its plugin's engineer).
