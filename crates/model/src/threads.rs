//! The compute thread pool every tensor operation runs on.

/// Sets the number of compute threads (call before any tensor work).
pub fn set_threads(n: usize) {
    if n > 0 {
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
}
