//! Weight interpolation between a fine-tuned model and the model it started from
//! (WiSE-FT, Wortsman et al. 2022): `θ = θ_base + ratio · (θ_tuned − θ_base)`; and the
//! uniform average of several fine-tunes of one start (a model soup, Wortsman et al. 2022),
//! built from the same step ([`soup`]).
//!
//! Fine-tuning on agent trajectories erodes general instruction following (IFEval); moving
//! the weights part of the way back to the start is a training-free way to trade some of
//! the fine-tune's gain for some of the general ability back. `ratio` 1 is the fine-tuned
//! model, 0 the base; values above 1 extrapolate along the fine-tune's direction. The two
//! models must have the same architecture and tensors (same names and shapes): a merge of
//! unrelated models is refused, not averaged.

use std::collections::HashMap;

use candle_core::Tensor;
use hat_model::train::TrainModel;
use hat_model::ModelConfig;

use crate::error::{Result, TrainError};
use crate::rotary::{is_rotary, reorder_rows};

/// The ratios [`interpolate`] accepts: from the base (0) to twice the fine-tune's step (2).
pub const RATIO_RANGE: std::ops::RangeInclusive<f64> = 0.0..=2.0;

/// Sets `tuned`'s weights to `base + ratio · (tuned − base)`, tensor by tensor.
pub fn interpolate(tuned: &TrainModel, base: &TrainModel, ratio: f64) -> Result<()> {
    // NaN and the infinities are outside the range too
    if !RATIO_RANGE.contains(&ratio) {
        return Err(TrainError::Invalid(format!(
            "merge ratio {ratio}: give a number from {} (the base model) to {} (1 is the \
             fine-tuned model)",
            RATIO_RANGE.start(),
            RATIO_RANGE.end()
        )));
    }
    let mut merged = HashMap::new();
    for (name, t, b) in paired(tuned, base)? {
        // b + r (t - b), in f32 as the weights are held.
        let m = (&b + ((&t - &b)? * ratio)?)?;
        merged.insert(name, m);
    }
    tuned.set_weights(&merged)?;
    Ok(())
}

/// How far `model` lies from `reference`: the L2 norm of their difference over every weight,
/// relative to `reference`'s norm. Fine-tunes of one start lie a few hundredths apart; two
/// models trained apart from scratch lie about 1.4 (independent weights of equal norm).
pub fn relative_distance(model: &TrainModel, reference: &TrainModel) -> Result<f64> {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (_, t, b) in paired(model, reference)? {
        diff += (&t - &b)?.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
        norm += b.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
    }
    Ok(if norm > 0.0 {
        (diff / norm).sqrt()
    } else {
        diff.sqrt()
    })
}

/// Every tensor of `tuned` with `base`'s tensor of the same name in `tuned`'s row order, once
/// the two are checked to hold the same tensors with the same shapes.
fn paired(tuned: &TrainModel, base: &TrainModel) -> Result<Vec<(String, Tensor, Tensor)>> {
    let (tc, bc) = (tuned.config(), base.config());
    let differ = shape_differences(tc, bc);
    if !differ.is_empty() {
        return Err(TrainError::Invalid(format!(
            "the two models differ in shape ({}; fine-tuned first, base second): merge a \
             fine-tuned model with the model its training started from",
            differ.join(", ")
        )));
    }
    let base_weights: HashMap<String, Tensor> = base.weights()?.into_iter().collect();
    let mut pairs = Vec::with_capacity(base_weights.len());
    for (name, t) in tuned.weights()? {
        let b = base_weights.get(&name).ok_or_else(|| {
            TrainError::Invalid(format!(
                "tensor `{name}` of the fine-tuned model is missing from the base model: \
                 merge a fine-tuned model with the model its training started from"
            ))
        })?;
        // A Hugging Face folder and a GGUF file of one llama model order the rows of q and k
        // differently (half-split against interleaved rotary pairs): bring the base's rows
        // into the fine-tuned model's order, or the average would mix unrelated rows.
        let b = if bc.rope_layout != tc.rope_layout && is_rotary(&name) {
            reorder_rows(b, bc.rope_layout, tc.head_dim)?
        } else {
            b.clone()
        };
        if b.shape() != t.shape() {
            return Err(TrainError::Invalid(format!(
                "tensor `{name}` has shape {:?} in the fine-tuned model and {:?} in the base",
                t.shape().dims(),
                b.shape().dims()
            )));
        }
        pairs.push((name, t, b));
    }
    if pairs.len() != base_weights.len() {
        let mut missing: Vec<&str> = base_weights
            .keys()
            .filter(|n| !pairs.iter().any(|(p, _, _)| p == *n))
            .map(String::as_str)
            .collect();
        missing.sort_unstable();
        let more = missing.len().saturating_sub(3);
        missing.truncate(3);
        return Err(TrainError::Invalid(format!(
            "the fine-tuned model lacks tensors of the base model (`{}`{}): merge a \
             fine-tuned model with the model its training started from",
            missing.join("`, `"),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        )));
    }
    Ok(pairs)
}

/// The farthest a soup member may lie from the mean of the members before it
/// ([`relative_distance`]) unless the caller allows any start: halfway to the distance of two
/// models trained apart (about 1.4), ten times and more what fine-tunes of one start lie apart.
pub const SOUP_MAX_DISTANCE: f64 = 0.5;

/// A soup and how far each member lay from the mean of the members before it (the first
/// member's entry is 0).
pub struct Soup {
    pub model: TrainModel,
    pub distances: Vec<f64>,
}

/// Averages `models` (fine-tunes of one start, each named for errors) into the first one,
/// weight by weight: the running mean after k models moves toward the k-th by 1/k
/// ([`interpolate`], so each is checked for shape and its rotary rows paired as in a merge).
/// Runs of one start that differ in data, seed or weighting land in one basin, and their
/// average often scores above each of them; models of other starts average into noise. No
/// file says where a model started, so the start is judged by distance: a member farther than
/// `max_distance` from the mean before it is refused (`None` takes any model of the shape).
pub fn soup(
    models: impl IntoIterator<Item = (String, Result<TrainModel>)>,
    max_distance: Option<f64>,
) -> Result<Soup> {
    let mut models = models.into_iter();
    let (first, mean) = models.next().ok_or_else(|| {
        TrainError::Invalid("a soup needs at least two models, none given".into())
    })?;
    let mut mean = mean?;
    let mut distances = vec![0.0];
    for (name, m) in models {
        let m = m?;
        let d = relative_distance(&m, &mean)?;
        if let Some(max) = max_distance.filter(|&max| d > max) {
            let of = if distances.len() == 1 {
                format!("`{first}`")
            } else {
                format!("the mean of the {} models before it", distances.len())
            };
            return Err(TrainError::OtherStart {
                name,
                distance: d,
                from: of,
                max,
            });
        }
        distances.push(d);
        // interpolate writes into its first argument: the k-th model becomes the new mean
        interpolate(&m, &mean, 1.0 / distances.len() as f64)?;
        mean = m;
    }
    if distances.len() < 2 {
        return Err(TrainError::Invalid(
            "a soup needs at least two models, one given".into(),
        ));
    }
    Ok(Soup {
        model: mean,
        distances,
    })
}

/// The shape fields in which two models differ, each as `field a vs b` (none when the two have
/// the same tensors with the same meaning; the numbers read from metadata compared as f32,
/// which both formats can hold).
fn shape_differences(a: &ModelConfig, b: &ModelConfig) -> Vec<String> {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-6 * x.abs().max(y.abs());
    let mut out = Vec::new();
    let mut field = |name: &str, x: String, y: String, same: bool| {
        if !same {
            out.push(format!("{name} {x} vs {y}"));
        }
    };
    let (an, bn) = (a.arch.name(), b.arch.name());
    field("architecture", an.into(), bn.into(), a.arch == b.arch);
    macro_rules! exact {
        ($name:literal, $f:ident) => {
            field($name, a.$f.to_string(), b.$f.to_string(), a.$f == b.$f)
        };
    }
    exact!("vocabulary", vocab_size);
    exact!("hidden size", hidden_size);
    exact!("intermediate size", intermediate_size);
    exact!("layers", num_layers);
    exact!("heads", num_heads);
    exact!("kv heads", num_kv_heads);
    exact!("head size", head_dim);
    exact!("tied embeddings", tie_embeddings);
    exact!("attention bias", attn_bias);
    field(
        "rms eps",
        a.rms_eps.to_string(),
        b.rms_eps.to_string(),
        close(a.rms_eps, b.rms_eps),
    );
    field(
        "rope theta",
        a.rope_theta.to_string(),
        b.rope_theta.to_string(),
        close(a.rope_theta as f64, b.rope_theta as f64),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::tiny_model;

    fn load(dir: &std::path::Path, seed: u64) -> TrainModel {
        tiny_model(dir, seed, "qwen2").unwrap();
        TrainModel::load(dir).unwrap().model
    }

    fn weights(m: &TrainModel) -> HashMap<String, Vec<f32>> {
        m.weights()
            .unwrap()
            .into_iter()
            .map(|(n, t)| (n, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
            .collect()
    }

    #[test]
    fn a_merge_moves_every_weight_the_ratio_of_the_way_from_the_base() {
        let dir = tempfile::tempdir().unwrap();
        let base = load(&dir.path().join("base"), 1);
        let (b, t) = (weights(&base), {
            let tuned = load(&dir.path().join("tuned"), 2);
            weights(&tuned)
        });
        assert_ne!(b, t, "two seeds give two models");
        for ratio in [0.0, 0.3, 1.0, 1.5] {
            let tuned = load(&dir.path().join("tuned"), 2);
            interpolate(&tuned, &base, ratio).unwrap();
            let m = weights(&tuned);
            assert_eq!(m.len(), b.len());
            for (name, mv) in &m {
                for ((x, bx), tx) in mv.iter().zip(&b[name]).zip(&t[name]) {
                    let want = bx + ratio as f32 * (tx - bx);
                    assert!(
                        (x - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "{name} at ratio {ratio}: {x} against {want}"
                    );
                }
            }
        }
    }

    fn named(dir: &std::path::Path, seeds: &[u64]) -> Vec<(String, Result<TrainModel>)> {
        seeds
            .iter()
            .map(|s| {
                let p = dir.join(format!("m{s}"));
                (format!("m{s}"), Ok(TrainModel::load(&p).unwrap().model))
            })
            .collect()
    }

    #[test]
    fn a_soup_is_the_mean_of_its_models() {
        let dir = tempfile::tempdir().unwrap();
        let ws: Vec<_> = (1..=3)
            .map(|seed| weights(&load(&dir.path().join(format!("m{seed}")), seed)))
            .collect();
        // three models of three random starts: only a soup that allows any start takes them
        let mean = soup(named(dir.path(), &[1, 2, 3]), None).unwrap();
        assert_eq!(mean.distances.len(), 3);
        assert!(mean.distances[1] > 0.5, "{:?}", mean.distances);
        for (name, mv) in weights(&mean.model) {
            for (i, x) in mv.iter().enumerate() {
                let want = ws.iter().map(|w| w[&name][i]).sum::<f32>() / 3.0;
                assert!(
                    (x - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "{name}: {x} {want}"
                );
            }
        }
        let one = soup(named(dir.path(), &[1]), None).err().unwrap();
        assert!(one.to_string().contains("at least two"), "{one}");
        assert!(soup(std::iter::empty(), None).is_err());
        let llama_dir = dir.path().join("llama");
        tiny_model(&llama_dir, 3, "llama").unwrap();
        let mut two = named(dir.path(), &[1]);
        two.push((
            "llama".into(),
            Ok(TrainModel::load(&llama_dir).unwrap().model),
        ));
        let e = soup(two, None).err().unwrap();
        assert!(e.to_string().contains("differ in shape"), "{e}");
    }

    /// Members near one another (fine-tunes of one start) make a soup under the default
    /// limit, and the distances it reports are theirs; a model of another start is refused
    /// by name, wherever it stands.
    #[test]
    fn a_soup_refuses_a_model_of_another_start() {
        let dir = tempfile::tempdir().unwrap();
        let start = load(&dir.path().join("m1"), 1);
        let w = weights(&start);
        // two "fine-tunes": the start with every weight moved by a small, different step
        let tuned = |step: f32| {
            let m = load(&dir.path().join("m1"), 1);
            let moved: HashMap<String, Tensor> = m
                .weights()
                .unwrap()
                .into_iter()
                .map(|(n, t)| {
                    let v: Vec<f32> = w[&n].iter().map(|x| x * (1.0 + step)).collect();
                    (n, Tensor::from_vec(v, t.shape(), t.device()).unwrap())
                })
                .collect();
            m.set_weights(&moved).unwrap();
            m
        };
        let near = vec![
            ("a".to_string(), Ok(tuned(0.01))),
            ("b".to_string(), Ok(tuned(-0.01))),
        ];
        let s = soup(near, Some(SOUP_MAX_DISTANCE)).unwrap();
        // b lies 0.02 of its norm from a (which it is measured against)
        assert!(
            (s.distances[1] - 0.02 / 1.01).abs() < 1e-4,
            "{:?}",
            s.distances
        );
        for (n, v) in weights(&s.model) {
            for (x, x0) in v.iter().zip(&w[&n]) {
                assert!((x - x0).abs() <= 1e-6 * (1.0 + x0.abs()), "{n}: {x} {x0}");
            }
        }
        load(&dir.path().join("m2"), 2);
        let other = || TrainModel::load(&dir.path().join("m2")).unwrap().model;
        for members in [
            vec![("a", tuned(0.01)), ("other", other())],
            vec![("a", tuned(0.01)), ("b", tuned(-0.01)), ("other", other())],
        ] {
            let n = members.len();
            let e = soup(
                members.into_iter().map(|(n, m)| (n.to_string(), Ok(m))),
                Some(SOUP_MAX_DISTANCE),
            )
            .err()
            .unwrap()
            .to_string();
            assert!(e.contains("`other`") && e.contains("same start"), "{e}");
            assert!(!e.contains("  "), "one space between words: {e}");
            let against = if n == 2 {
                "from `a`"
            } else {
                "mean of the 2 models"
            };
            assert!(e.contains(against), "{e}");
        }
    }

    #[test]
    fn a_gguf_base_merges_with_a_hugging_face_folder_row_for_row() {
        // the base as GGUF (llama q/k rows interleaved), the fine-tuned model as a folder
        // (half-split): the merge must pair each row with its own
        let dir = tempfile::tempdir().unwrap();
        tiny_model(&dir.path().join("base"), 1, "llama").unwrap();
        let base_hf = TrainModel::load(&dir.path().join("base")).unwrap().model;
        let gguf = dir.path().join("base.gguf");
        crate::export::gguf(&base_hf, &dir.path().join("base"), "f32", &gguf).unwrap();
        let base = TrainModel::load(&gguf).unwrap().model;
        assert_ne!(base.config().rope_layout, base_hf.config().rope_layout);
        let tuned = load_llama(&dir.path().join("tuned"), 2);
        let (b, t) = (weights(&base_hf), weights(&tuned));
        interpolate(&tuned, &base, 0.5).unwrap();
        for (name, mv) in weights(&tuned) {
            for ((x, bx), tx) in mv.iter().zip(&b[&name]).zip(&t[&name]) {
                assert!((x - (bx + tx) / 2.0).abs() <= 1e-6, "{name}: {x} {bx} {tx}");
            }
        }
    }

    fn load_llama(dir: &std::path::Path, seed: u64) -> TrainModel {
        tiny_model(dir, seed, "llama").unwrap();
        TrainModel::load(dir).unwrap().model
    }

    #[test]
    fn a_ratio_out_of_range_or_models_of_other_shapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = load(&dir.path().join("base"), 1);
        let tuned = load(&dir.path().join("tuned"), 2);
        let before = weights(&tuned);
        for r in [-0.1, 2.5, f64::NAN, f64::INFINITY] {
            let e = interpolate(&tuned, &base, r).unwrap_err().to_string();
            assert!(e.contains("merge ratio"), "{e}");
        }
        let llama_dir = dir.path().join("llama");
        tiny_model(&llama_dir, 3, "llama").unwrap();
        let other = TrainModel::load(&llama_dir).unwrap().model;
        let e = interpolate(&tuned, &other, 0.5).unwrap_err().to_string();
        assert!(e.contains("differ in shape"), "{e}");
        assert!(
            e.contains("architecture"),
            "names the field that differs: {e}"
        );
        assert_eq!(weights(&tuned), before, "a refused merge changes nothing");
    }
}
