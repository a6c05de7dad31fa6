//! The timing wheel (to be written).
