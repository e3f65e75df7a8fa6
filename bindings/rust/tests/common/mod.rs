//! Helpers shared by the integration tests: a deterministic synthetic classification task and a
//! small model over it.
#![allow(dead_code)]

use cohort::{
    Graph, MlpOptions, Optimizer, OptimizerKind, OptimizerOptions, Trainer, TrainerOptions,
};

pub const FEATURES: usize = 16;
pub const CLASSES: usize = 4;

/// A small deterministic generator (an LCG), so the tests need no crate and repeat exactly.
pub struct Lcg(pub u64);

impl Lcg {
    /// Uniform in [-1, 1).
    pub fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// `batch` examples whose label is the largest of the first CLASSES features: learnable by a
/// linear model, so a few dozen steps must lower the loss.
pub fn batch(rng: &mut Lcg, batch: usize) -> (Vec<f32>, Vec<i32>) {
    let x: Vec<f32> = (0..batch * FEATURES).map(|_| rng.next()).collect();
    let y = (0..batch)
        .map(|i| {
            let row = &x[i * FEATURES..i * FEATURES + CLASSES];
            let mut best = 0;
            for c in 1..CLASSES {
                if row[c] > row[best] {
                    best = c;
                }
            }
            best as i32
        })
        .collect();
    (x, y)
}

/// The built-in MLP over the synthetic task.
pub fn mlp(batch: i64, hidden: i64) -> Graph {
    Graph::mlp(&MlpOptions {
        batch,
        in_features: FEATURES as i64,
        hidden: vec![hidden],
        classes: CLASSES as i64,
        ..MlpOptions::default()
    })
    .expect("mlp")
}

pub fn adamw(lr: f64) -> Optimizer {
    Optimizer::new(&OptimizerOptions {
        kind: OptimizerKind::AdamW,
        lr,
        ..OptimizerOptions::default()
    })
    .expect("optimizer")
}

pub fn trainer(batch: i64, hidden: i64, seed: u64) -> Trainer {
    Trainer::new(
        &mlp(batch, hidden),
        &adamw(1e-2),
        &TrainerOptions { seed, ..TrainerOptions::default() },
    )
    .expect("trainer")
}

/// A fresh path in the system's temporary directory, unique to this process and `tag`.
pub fn temp_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("cohort-rust-{}-{}", std::process::id(), tag))
}
