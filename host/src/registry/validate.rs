//! Argument validation against registry schemas (stub).
