//! Call overhead of the Rust binding: one training step of a small MLP, timed step by step, as
//! bench/bindings/README.md defines it for every language (compare with step_c in one run).
//!
//!   step_rust --hidden H --batch B --steps N --warmup W
//!
//! Prints `step_us MEDIAN MEAN` (microseconds per step over the N timed steps).

use std::process::exit;
use std::time::Instant;

use cohort::{Graph, MlpOptions, Optimizer, OptimizerOptions, Tensor, Trainer, TrainerOptions};

struct Args {
    hidden: i64,
    batch: i64,
    steps: usize,
    warmup: usize,
}

fn usage(message: &str) -> ! {
    eprintln!("error: {}\nusage: step_rust --hidden H --batch B --steps N --warmup W", message);
    exit(2);
}

fn parse_args() -> Args {
    let mut a = Args { hidden: 256, batch: 128, steps: 200, warmup: 20 };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value =
            pair.get(1).unwrap_or_else(|| usage(&format!("missing value after {}", pair[0])));
        let n: i64 = value.parse().unwrap_or_else(|_| usage(&format!("not a number: {}", value)));
        match pair[0].as_str() {
            "--hidden" => a.hidden = n,
            "--batch" => a.batch = n,
            "--steps" => a.steps = n.max(0) as usize,
            "--warmup" => a.warmup = n.max(0) as usize,
            other => usage(&format!("unknown option {}", other)),
        }
    }
    if a.hidden < 1 || a.batch < 1 || a.steps < 1 {
        usage("hidden, batch and steps must be >= 1");
    }
    a
}

fn run(a: &Args) -> cohort::Result<()> {
    cohort::set_num_threads(1)?;
    let graph = Graph::mlp(&MlpOptions {
        batch: a.batch,
        in_features: 784,
        hidden: vec![a.hidden],
        classes: 10,
        ..MlpOptions::default()
    })?;
    let optimizer = Optimizer::new(&OptimizerOptions::default())?; // SGD, lr 0.01
    let mut trainer =
        Trainer::new(&graph, &optimizer, &TrainerOptions { seed: 1, ..TrainerOptions::default() })?;

    // The inputs are made once, in plain Vecs, and passed to every step.
    let b = a.batch as usize;
    let x: Vec<f32> = (0..b * 784).map(|i| (i % 255) as f32 / 255.0).collect();
    let y: Vec<i32> = (0..b).map(|i| (i % 10) as i32).collect();

    let mut times = Vec::with_capacity(a.steps);
    for i in 0..a.warmup + a.steps {
        let start = Instant::now();
        trainer.step(&[Tensor::new("x", &x, &[a.batch, 784]), Tensor::new("y", &y, &[a.batch])])?;
        if i >= a.warmup {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    times.sort_by(|p, q| p.partial_cmp(q).unwrap());
    let n = times.len();
    let median = if n % 2 == 1 { times[n / 2] } else { 0.5 * (times[n / 2 - 1] + times[n / 2]) };
    println!("step_us {:.2} {:.2}", median, mean);
    Ok(())
}

fn main() {
    let args = parse_args();
    if let Err(e) = run(&args) {
        eprintln!("error: {}", e);
        exit(1);
    }
}
