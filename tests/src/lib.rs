//! Harnesses shared by Fusee's end-to-end and crash tests.
