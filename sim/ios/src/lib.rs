//! aab-ios-sim (scaffold; see README.md).
