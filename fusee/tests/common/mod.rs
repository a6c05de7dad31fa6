//! Helpers shared by the `fusee` crate's integration tests.

pub(crate) mod cart;
pub(crate) mod effects;
