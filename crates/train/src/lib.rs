//! HAT training: trajectories become tokens with an assistant-only loss ([`tokens`]),
//! conversations sharing a prompt prefix are packed into one sequence ([`pack`]), and one
//! training loop ([`stage`], with SFT in [`sft`]) runs the model crate's [`hat_model::train::TrainModel`] with
//! AdamW ([`optim`]), checkpoints that resume exactly ([`checkpoint`]), export to GGUF
//! ([`export`]), weight interpolation toward the starting model ([`merge`]) and curves drawn
//! to PNG ([`plot`]). Every stage (SFT, on-policy distillation in
//! [`distill`]) is a [`stage::Stage`] of the one loop in [`stage`].

pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod distill;
pub mod durable;
pub mod error;
pub mod export;
pub mod fixture;
pub mod merge;
pub mod optim;
pub mod pack;
pub mod plot;
pub mod replay;
pub mod rl;
pub mod rotary;
pub mod sft;
pub mod snapshot;
pub mod stage;
pub mod tokens;

pub use error::{Result, TrainError};

/// Makes glibc's allocator keep freed memory for reuse instead of returning it to the kernel.
///
/// A training step allocates and frees gigabytes of activations and gradients. By default
/// glibc serves each large block with a fresh `mmap`, so every step pays a page fault per 4 KiB
/// touched and a TLB shootdown across threads per unmap: about 30% of a step's time on a
/// 2-core machine, measured with `perf`. Served from a heap that is never trimmed, a step
/// reuses the previous step's pages (`hat bench train`: 56 -> 155 tokens/s on one 512-token
/// sequence). Call once, before the work; a no-op off Linux/glibc.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before the training work.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 256 << 20);
    }
}
