//! AdamW with decoupled weight decay, a linear-warmup cosine schedule and global-norm
//! clipping, over the model's variables. The moments are plain vectors so a checkpoint
//! saves and restores them exactly.

use candle_core::{Tensor, Var};

use crate::error::{Result, TrainError};

/// Optimiser hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdamWConfig {
    pub lr: f64,
    /// The cosine decays to `lr * min_lr_ratio`.
    pub min_lr_ratio: f64,
    pub warmup_steps: usize,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Gradients are scaled down to this global L2 norm when above it (0: no clipping).
    pub clip_norm: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 1e-4,
            min_lr_ratio: 0.1,
            warmup_steps: 10,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.01,
            clip_norm: 1.0,
        }
    }
}

impl AdamWConfig {
    /// Learning rate of optimiser step `step` (0-based) out of `total`.
    pub fn lr_at(&self, step: usize, total: usize) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let span = total.saturating_sub(self.warmup_steps).max(1);
        let t = ((step - self.warmup_steps) as f64 / span as f64).min(1.0);
        let min = self.lr * self.min_lr_ratio;
        min + 0.5 * (self.lr - min) * (1.0 + (std::f64::consts::PI * t).cos())
    }
}

/// AdamW state for a list of variables.
pub struct AdamW {
    pub cfg: AdamWConfig,
    /// Optimiser steps taken.
    pub t: u64,
    pub m: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
}

/// Global L2 norm of gradients.
pub fn global_norm(grads: &[Vec<f32>]) -> f64 {
    use rayon::prelude::*;
    // fixed chunks summed in order: the same gradients give the same norm on any thread
    // count (a resumed run must repeat the clipping bit for bit)
    let parts: Vec<f64> = grads
        .iter()
        .flat_map(|g| g.chunks(CHUNK))
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|c| c.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>())
        .collect();
    // folded from +0.0: an empty sum of floats is -0.0, which would print as a "-0.000" norm
    parts.iter().fold(0.0f64, |a, b| a + b).sqrt()
}

/// Values per parallel task of the update.
const CHUNK: usize = 1 << 18;

impl AdamW {
    /// Fresh state for variables of these sizes.
    pub fn new(cfg: AdamWConfig, sizes: &[usize]) -> Self {
        Self {
            cfg,
            t: 0,
            m: sizes.iter().map(|&n| vec![0.0; n]).collect(),
            v: sizes.iter().map(|&n| vec![0.0; n]).collect(),
        }
    }

    /// Clips `grads` to the configured norm and applies one update at learning rate `lr`. An
    /// empty gradient is zero (a variable the step's loss did not reach).
    /// Returns the gradient norm before clipping. Weight decay skips 1-D tensors (norm
    /// weights, biases), as is usual.
    pub fn step(&mut self, vars: &[(String, Var)], grads: &mut [Vec<f32>], lr: f64) -> Result<f64> {
        if vars.len() != grads.len() || vars.len() != self.m.len() {
            return Err(TrainError::Invalid(format!(
                "optimiser holds {} tensors, model {}, gradients {}",
                self.m.len(),
                vars.len(),
                grads.len()
            )));
        }
        let norm = global_norm(grads);
        if !norm.is_finite() {
            return Err(TrainError::Diverged {
                step: self.t as usize,
                value: norm as f32,
            });
        }
        let clip = if self.cfg.clip_norm > 0.0 && norm > self.cfg.clip_norm {
            (self.cfg.clip_norm / norm) as f32
        } else {
            1.0
        };
        self.t += 1;
        let c = self.cfg;
        let (b1, b2) = (c.beta1 as f32, c.beta2 as f32);
        let bc1 = 1.0 - c.beta1.powi(self.t as i32);
        let bc2 = 1.0 - c.beta2.powi(self.t as i32);
        let step = (lr / bc1) as f32;
        let inv_bc2_sqrt = (1.0 / bc2.sqrt()) as f32;
        let eps = c.eps as f32;
        for (g, (_, var)) in grads.iter().zip(vars) {
            if !g.is_empty() && g.len() != var.elem_count() {
                return Err(TrainError::Invalid(format!(
                    "gradient of {} values for a variable of {}",
                    g.len(),
                    var.elem_count()
                )));
            }
        }
        // all updates first: a step that would make a weight non-finite leaves the weights as
        // they were (the run then stops; its last checkpoint on disk is the good state)
        let weights = vars
            .iter()
            .map(|(_, var)| var.as_tensor().flatten_all()?.to_vec1::<f32>())
            .collect::<candle_core::Result<Vec<_>>>()?;
        let decay_of = |var: &Var| {
            if var.rank() >= 2 {
                (1.0 - lr * c.weight_decay) as f32
            } else {
                1.0
            }
        };
        // the update is memory-bound over ~4 values per weight: chunks on every thread
        use rayon::prelude::*;
        let mut updated = weights;
        let bad = updated
            .iter_mut()
            .zip(self.m.iter_mut())
            .zip(self.v.iter_mut())
            .zip(grads.iter())
            .zip(vars)
            .find_map(|((((w, m), v), g), (_, var))| {
                let decay = decay_of(var);
                w.par_chunks_mut(CHUNK)
                    .zip(m.par_chunks_mut(CHUNK))
                    .zip(v.par_chunks_mut(CHUNK))
                    .enumerate()
                    .filter_map(|(c, ((w, m), v))| {
                        let update = |w: &mut f32, m: &mut f32, v: &mut f32, gj: f32| {
                            *m = b1 * *m + (1.0 - b1) * gj;
                            *v = b2 * *v + (1.0 - b2) * gj * gj;
                            let denom = v.sqrt() * inv_bc2_sqrt + eps;
                            *w = *w * decay - step * *m / denom;
                        };
                        let g = g.get(c * CHUNK..c * CHUNK + w.len());
                        let wmv = w.iter_mut().zip(m.iter_mut()).zip(v.iter_mut());
                        match g {
                            Some(g) => wmv
                                .zip(g)
                                .for_each(|(((w, m), v), g)| update(w, m, v, g * clip)),
                            // an empty gradient is zero
                            None => wmv.for_each(|((w, m), v)| update(w, m, v, 0.0)),
                        }
                        w.iter().copied().find(|x| !x.is_finite())
                    })
                    .find_any(|_| true)
            });
        if let Some(value) = bad {
            return Err(TrainError::Diverged {
                step: self.t as usize,
                value,
            });
        }
        for ((_, var), w) in vars.iter().zip(updated) {
            var.set(&Tensor::from_vec(w, var.shape(), var.device())?)?;
        }
        Ok(norm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_norm_of_gradients_no_loss_reached_is_plus_zero() {
        let n = global_norm(&[Vec::new(), Vec::new()]);
        assert!(n == 0.0 && n.is_sign_positive(), "{n}");
        assert_eq!(global_norm(&[vec![3.0], vec![4.0]]), 5.0);
    }

    #[test]
    fn schedule_warms_up_then_decays_to_the_floor() {
        let c = AdamWConfig {
            lr: 1.0,
            min_lr_ratio: 0.1,
            warmup_steps: 4,
            ..Default::default()
        };
        assert!((c.lr_at(0, 20) - 0.25).abs() < 1e-12);
        assert!((c.lr_at(3, 20) - 1.0).abs() < 1e-12);
        assert!(c.lr_at(10, 20) < 1.0 && c.lr_at(10, 20) > 0.1);
        assert!((c.lr_at(20, 20) - 0.1).abs() < 1e-12);
        assert!((c.lr_at(50, 20) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn one_step_matches_the_adamw_formula_and_clips() {
        let dev = candle_core::Device::Cpu;
        let var = Var::from_tensor(&Tensor::new(&[[1f32, -2.0]], &dev).unwrap()).unwrap();
        let vars = vec![("w".to_string(), var)];
        let cfg = AdamWConfig {
            lr: 0.1,
            weight_decay: 0.5,
            clip_norm: 1.0,
            ..Default::default()
        };
        let mut opt = AdamW::new(cfg, &[2]);
        let mut g = vec![vec![3.0f32, 4.0]]; // norm 5, clipped to 1: (0.6, 0.8)
        let norm = opt.step(&vars, &mut g, 0.1).unwrap();
        assert!((norm - 5.0).abs() < 1e-9);
        let w = vars[0]
            .1
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        // first step: m_hat = g, v_hat = g^2, update = lr * sign(g) (eps aside)
        let expect = [1.0 * (1.0 - 0.05) - 0.1, -2.0 * (1.0 - 0.05) - 0.1];
        for (a, b) in w.iter().zip(expect) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
