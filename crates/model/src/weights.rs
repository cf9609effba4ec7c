//! Raw tensors as loaded, and their conversion to the weight format chosen for a run.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Tensor, Var};

use crate::error::{Error, Result};

/// A tensor as stored in the file.
#[derive(Debug)]
pub enum RawTensor {
    /// GGUF tensor, quantised or float.
    Quant(QTensor),
    /// Float tensor (safetensors or in-memory).
    Dense(Tensor),
}

impl RawTensor {
    /// Dequantised f32 copy.
    pub fn to_f32(&self, device: &Device) -> Result<Tensor> {
        Ok(match self {
            Self::Quant(q) => q.dequantize(device)?,
            Self::Dense(t) => t.to_dtype(DType::F32)?,
        })
    }
    /// The shape, `[out, in]` for a linear weight.
    pub fn dims(&self) -> &[usize] {
        match self {
            Self::Quant(q) => q.shape().dims(),
            Self::Dense(t) => t.dims(),
        }
    }
    /// Storage format name (e.g. `q4_1`, `f32`, `bf16`).
    pub fn format_name(&self) -> String {
        match self {
            Self::Quant(q) => format!("{:?}", q.dtype()).to_lowercase(),
            Self::Dense(t) => format!("{:?}", t.dtype()).to_lowercase(),
        }
    }
}

/// Weight format selected per run for the linear layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// Keep what the file has (quantised stays quantised).
    #[default]
    Original,
    Q8_0,
    Q4_0,
    F32,
    F16,
    BF16,
}

impl FromStr for WeightFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "original" | "orig" | "file" => Self::Original,
            "q8_0" | "q8" => Self::Q8_0,
            "q4_0" | "q4" => Self::Q4_0,
            "f32" => Self::F32,
            "f16" => Self::F16,
            "bf16" => Self::BF16,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown weight format `{other}` (original, q8_0, q4_0, f32, f16, bf16)"
                )))
            }
        })
    }
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Original => "original",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
        })
    }
}

/// Weight of a linear layer in its run-time form.
#[derive(Debug, Clone)]
pub enum LinearWeight {
    /// Quantised matrix (ggml block format).
    Quant(Arc<QTensor>),
    /// Dense matrix `(out, in)` in f32, f16 or bf16.
    Dense(Tensor),
    /// Q4_0, Q4_1 or Q8_0 repacked for the CPU kernels ([`crate::kernels`]).
    Packed(Arc<crate::kernels::PackedQuant>),
}

impl LinearWeight {
    /// Converts a raw tensor to `format`. Trainable weights are always dense f32 [`Var`]s.
    pub fn convert(raw: RawTensor, format: WeightFormat, device: &Device) -> Result<Self> {
        let quantize = |raw: &RawTensor, dt: GgmlDType| -> Result<Self> {
            let t = raw.to_f32(device)?;
            let cols = t.dims().last().copied().unwrap_or(0);
            if cols % dt.block_size() != 0 {
                return Err(Error::InvalidArgument(format!(
                    "cannot quantise to {dt:?}: row length {cols} is not a multiple of {}",
                    dt.block_size()
                )));
            }
            Ok(Self::Quant(Arc::new(QTensor::quantize(&t, dt)?)))
        };
        match format {
            WeightFormat::Original => match raw {
                RawTensor::Quant(q) => match q.dtype() {
                    GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => {
                        let dt = match q.dtype() {
                            GgmlDType::F16 => DType::F16,
                            GgmlDType::BF16 => DType::BF16,
                            _ => DType::F32,
                        };
                        Ok(Self::Dense(q.dequantize(device)?.to_dtype(dt)?))
                    }
                    _ => Ok(Self::Quant(Arc::new(q))),
                },
                RawTensor::Dense(t) => Ok(Self::Dense(t)),
            },
            WeightFormat::Q8_0 => quantize(&raw, GgmlDType::Q8_0),
            WeightFormat::Q4_0 => quantize(&raw, GgmlDType::Q4_0),
            WeightFormat::F32 => Ok(Self::Dense(raw.to_f32(device)?)),
            WeightFormat::F16 => Ok(Self::Dense(raw.to_f32(device)?.to_dtype(DType::F16)?)),
            WeightFormat::BF16 => Ok(Self::Dense(raw.to_f32(device)?.to_dtype(DType::BF16)?)),
        }
    }

    /// Storage format name.
    pub fn format_name(&self) -> String {
        match self {
            Self::Quant(q) => format!("{:?}", q.dtype()).to_lowercase(),
            Self::Dense(t) => format!("{:?}", t.dtype()).to_lowercase(),
            Self::Packed(p) => p.format_name(),
        }
    }

    /// Bytes of storage.
    pub fn storage_bytes(&self) -> usize {
        match self {
            Self::Quant(q) => q.storage_size_in_bytes(),
            Self::Dense(t) => t.elem_count() * t.dtype().size_in_bytes(),
            Self::Packed(p) => p.storage_bytes(),
        }
    }

    /// Output features.
    pub fn out_features(&self) -> Result<usize> {
        Ok(match self {
            Self::Quant(q) => q.shape().dims()[0],
            Self::Dense(t) => t.dim(0)?,
            Self::Packed(p) => p.rows(),
        })
    }

    /// Repacks Q4_0, Q4_1 and Q8_0 on the CPU for the hand-written kernels (every CPU has one:
    /// see [`crate::simd::Isa`]).
    pub fn packed_for_cpu(self) -> Self {
        match &self {
            Self::Quant(q)
                if matches!(
                    q.dtype(),
                    GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q8_0
                ) && q.device().is_cpu() =>
            {
                match crate::kernels::PackedQuant::from_qtensor(q) {
                    Some(p) => Self::Packed(Arc::new(p)),
                    None => self,
                }
            }
            _ => self,
        }
    }

    /// The matmul wrapper used on the inference path.
    pub fn qmatmul(&self) -> Option<QMatMul> {
        match self {
            Self::Quant(q) => Some(QMatMul::QTensor(q.clone())),
            Self::Dense(_) | Self::Packed(_) => None,
        }
    }
}

/// Named raw tensors of one model, in GGUF naming (`blk.N.attn_q.weight` ...).
#[derive(Debug, Default)]
pub struct WeightMap {
    map: HashMap<String, RawTensor>,
}

impl WeightMap {
    /// Empty map.
    pub fn new() -> Self {
        Self::default()
    }
    /// Inserts a tensor.
    pub fn insert(&mut self, name: impl Into<String>, t: RawTensor) {
        self.map.insert(name.into(), t);
    }
    /// Removes and returns a tensor.
    pub fn take(&mut self, name: &str) -> Option<RawTensor> {
        self.map.remove(name)
    }
    /// Removes a tensor that must exist.
    pub fn require(&mut self, name: &str) -> Result<RawTensor> {
        self.take(name)
            .ok_or_else(|| Error::Missing(format!("tensor `{name}`")))
    }
    /// A tensor's shape, if it exists.
    pub fn dims(&self, name: &str) -> Option<&[usize]> {
        self.map.get(name).map(RawTensor::dims)
    }
    /// Whether a tensor exists.
    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }
    /// Count of tensors per storage format.
    pub fn format_counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut m = std::collections::BTreeMap::new();
        for t in self.map.values() {
            *m.entry(t.format_name()).or_insert(0) += 1;
        }
        m
    }
}

/// Creates a trainable f32 variable from a raw tensor.
pub fn trainable(raw: &RawTensor, device: &Device) -> Result<Var> {
    Ok(Var::from_tensor(&raw.to_f32(device)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requantise_roundtrip_is_close() {
        let dev = Device::Cpu;
        let t = Tensor::randn(0f32, 1.0, (4, 64), &dev).unwrap();
        for f in [
            WeightFormat::Q8_0,
            WeightFormat::Q4_0,
            WeightFormat::F16,
            WeightFormat::BF16,
        ] {
            let w = LinearWeight::convert(RawTensor::Dense(t.clone()), f, &dev).unwrap();
            let back = match &w {
                LinearWeight::Quant(q) => q.dequantize(&dev).unwrap(),
                LinearWeight::Dense(d) => d.to_dtype(DType::F32).unwrap(),
                LinearWeight::Packed(_) => unreachable!(),
            };
            let err: f32 = (back - &t)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar()
                .unwrap();
            assert!(err < 0.5, "{f}: {err}");
        }
        let odd = Tensor::zeros((2, 40), DType::F32, &dev).unwrap();
        assert!(LinearWeight::convert(RawTensor::Dense(odd), WeightFormat::Q4_0, &dev).is_err());
        assert_eq!("Q8_0".parse::<WeightFormat>().unwrap(), WeightFormat::Q8_0);
        assert!("q3".parse::<WeightFormat>().is_err());
    }
}
