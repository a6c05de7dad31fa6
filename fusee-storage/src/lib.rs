//! The Fusee storage contract (to be written).
