//! The two row orders of a llama model's query and key projections.
//!
//! Rotary embeddings turn pairs of a head's dimensions together. Hugging Face llama weights
//! pair dimension `i` with `i + head_dim / 2` (half-split); GGUF llama tensors are permuted
//! so that the pairs are neighbours (interleaved), as llama.cpp's converter writes them.
//! Whatever moves llama weights between the two (export, merge) reorders the rows of q and
//! k, and of their biases when the model has them: a bias left in the other order adds each
//! row's bias to a different dimension.

use candle_core::Tensor;
use hat_model::RopeLayout;

use crate::error::Result;

/// Whether tensor `name` (GGUF naming) has rows in rotary order: the query and key
/// projections' weights and biases.
pub fn is_rotary(name: &str) -> bool {
    name.ends_with("attn_q.weight")
        || name.ends_with("attn_k.weight")
        || name.ends_with("attn_q.bias")
        || name.ends_with("attn_k.bias")
}

/// `t`'s rows (per head of `head_dim`) from layout `from` into the other layout; `t` is a
/// weight (rows x columns) or a bias (rows).
pub fn reorder_rows(t: &Tensor, from: RopeLayout, head_dim: usize) -> Result<Tensor> {
    let rows = t.dim(0)?;
    let cols = t.elem_count() / rows.max(1);
    let heads = rows / head_dim;
    // half-split row (h, j, i) <-> interleaved row (h, i, j) for j < 2, i < head_dim / 2
    let split = match from {
        RopeLayout::HalfSplit => (heads, 2, head_dim / 2, cols),
        RopeLayout::Interleaved => (heads, head_dim / 2, 2, cols),
    };
    Ok(t.reshape(split)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(t.shape())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn the_two_orders_pair_the_same_dimensions_and_undo_each_other() {
        // one head of 6: half-split pairs (0,3) (1,4) (2,5), interleaved (0,1) (2,3) (4,5)
        let rows: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let bias = Tensor::from_vec(rows[..6].to_vec(), 6, &Device::Cpu).unwrap();
        let inter = reorder_rows(&bias, RopeLayout::HalfSplit, 6).unwrap();
        assert_eq!(
            inter.to_vec1::<f32>().unwrap(),
            [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        );
        let back = reorder_rows(&inter, RopeLayout::Interleaved, 6).unwrap();
        assert_eq!(back.to_vec1::<f32>().unwrap(), rows[..6]);
        // a weight moves whole rows
        let w = Tensor::from_vec(rows, (6, 2), &Device::Cpu).unwrap();
        let wi = reorder_rows(&w, RopeLayout::HalfSplit, 6).unwrap();
        assert_eq!(
            wi.to_vec2::<f32>().unwrap()[1],
            [6.0, 7.0],
            "row 3 is the second in interleaved order"
        );
        assert!(is_rotary("blk.3.attn_k.bias") && !is_rotary("blk.3.attn_v.bias"));
    }
}
