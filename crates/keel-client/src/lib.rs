//! keel client
