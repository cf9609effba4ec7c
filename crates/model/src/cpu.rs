//! Borrowing the elements of CPU tensors, for the hand-written kernels: a view of the
//! storage (start offset applied) instead of `to_vec1` copies on every call.

use candle_core::{Layout, Storage, Tensor, WithDType};

use crate::error::{Error, Result};

/// The elements of a CPU storage from the layout's start offset on (index them with the
/// layout's strides).
pub fn slice<'a, T: WithDType>(storage: &'a Storage, layout: &Layout) -> Result<&'a [T]> {
    match storage {
        Storage::Cpu(cpu) => Ok(&cpu.as_slice::<T>()?[layout.start_offset()..]),
        _ => Err(Error::InvalidArgument(
            "this kernel runs on the CPU; the tensor lives on another device".into(),
        )),
    }
}

/// Runs `f` on the elements of `t` in row-major order: borrowed when `t` is a contiguous CPU
/// tensor of type `T`, copied (and converted) otherwise.
pub fn with_elems<T: WithDType, R>(t: &Tensor, f: impl FnOnce(&[T]) -> R) -> Result<R> {
    if t.is_contiguous() && t.dtype() == T::DTYPE {
        let (storage, layout) = t.storage_and_layout();
        if let Ok(all) = slice::<T>(&storage, layout) {
            return Ok(f(&all[..t.elem_count()]));
        }
    }
    let v = t.flatten_all()?.to_dtype(T::DTYPE)?.to_vec1::<T>()?;
    Ok(f(&v))
}
