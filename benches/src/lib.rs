//! Workloads shared by Fusee's criterion benches and comparison binary.
