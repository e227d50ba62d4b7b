//! test harness
