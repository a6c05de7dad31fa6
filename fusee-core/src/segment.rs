//! Log segment format (to be written).
