//! Fashion-MNIST with a two-layer MLP, through the `cohort` crate only: the program a Rust user
//! copies from. The C, Python and Java examples do exactly the same (examples/README.md), so the
//! four print the same test accuracy for the same arguments. Started alone it trains on one
//! process; under `cohort-run -n 2` (or torchrun, mpirun, srun) the ranks train one model with
//! data parallelism.
//!
//!   fashion_mnist [--data DIR] [--steps N] [--epochs E] [--batch B] [--hidden H] [--lr LR]
//!                 [--seed S] [--threads T]
//!
//! Built as the crate's example: `cargo run --release --example fashion_mnist -- --steps 300`.

use std::io::Write;
use std::path::Path;
use std::process::exit;
use std::time::Instant;

use cohort::{
    Comm, CommOptions, DType, Dataset, Graph, Initializer, Optimizer, OptimizerKind,
    OptimizerOptions, Plan, PlanOptions, Preset, Sampler, SamplerOptions, Schedule, Split,
    TensorMut, Trainer, TrainerOptions, Value,
};

const USAGE: &str =
    "usage: fashion_mnist [--data DIR] [--steps N] [--epochs E] [--batch B] [--hidden H] \
                     [--lr LR] [--seed S] [--threads T]";

struct Options {
    data: String,
    steps: i64,
    epochs: i64,
    batch: i64,
    hidden: i64,
    threads: i64,
    lr: f64,
    seed: u64,
}

fn usage_error(message: &str) -> ! {
    eprintln!("error: {}\n{}", message, USAGE);
    exit(2);
}

fn number<T: std::str::FromStr>(text: &str) -> T {
    text.parse().unwrap_or_else(|_| usage_error(&format!("not a number: {}", text)))
}

fn parse_args() -> Options {
    let mut o = Options {
        data: "/usr/share/datasets/fashion-mnist".to_owned(),
        steps: 0,
        epochs: 1,
        batch: 64,
        hidden: 256,
        threads: 0,
        lr: 1e-3,
        seed: 1,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value =
            it.next().unwrap_or_else(|| usage_error(&format!("missing value after {}", flag)));
        match flag.as_str() {
            "--data" => o.data = value.clone(),
            "--steps" => o.steps = number(value),
            "--epochs" => o.epochs = number(value),
            "--batch" => o.batch = number(value),
            "--hidden" => o.hidden = number(value),
            "--threads" => o.threads = number(value),
            "--lr" => o.lr = number(value),
            "--seed" => o.seed = number(value),
            _ => usage_error(&format!("unknown option {}", flag)),
        }
    }
    if o.steps < 0
        || o.epochs < 1
        || o.batch < 1
        || o.hidden < 1
        || o.threads < 0
        || o.lr.is_nan()
        || o.lr <= 0.0
    {
        usage_error("epochs, batch and hidden must be >= 1, lr > 0, steps and threads >= 0");
    }
    o
}

/// y = x W^T + b with W [out, in] drawn like PyTorch's nn.Linear, b zeros.
fn add_linear(
    g: &mut Graph,
    name: &str,
    x: Value,
    inputs: i64,
    outputs: i64,
) -> cohort::Result<Value> {
    // Gain 1/sqrt(3): bound 1/sqrt(fan_in).
    let init = Initializer::kaiming_uniform(0.5773502691896258);
    let w = g.add_parameter(&format!("{}.weight", name), DType::F32, &[outputs, inputs], &init)?;
    let b =
        g.add_parameter(&format!("{}.bias", name), DType::F32, &[outputs], &Initializer::zeros())?;
    g.add_op("linear", name, &[x, w, b], None)
}

/// x [B, 784] -> fc1 -> relu -> logits [B, 10]; loss = cross_entropy(logits, y).
fn build_mlp(batch: i64, hidden: i64) -> cohort::Result<Graph> {
    let mut g = Graph::new()?;
    let x = g.add_input("x", DType::F32, &[batch, 784])?;
    let y = g.add_input("y", DType::I32, &[batch])?;
    let h = add_linear(&mut g, "fc1", x, 784, hidden)?;
    let r = g.add_op("relu", "act1", &[h], None)?;
    let logits = add_linear(&mut g, "logits", r, hidden, 10)?;
    let loss = g.add_op("cross_entropy", "loss", &[logits, y], None)?;
    g.mark_output(logits)?;
    g.set_loss(loss)?;
    Ok(g)
}

fn make_sampler(
    d: &Dataset,
    seed: u64,
    rank: i32,
    world: i32,
    shuffle: bool,
) -> cohort::Result<Sampler> {
    Sampler::new(d, &SamplerOptions { seed, rank, world, shuffle })
}

/// Share of the 10,000 test images classified right, in batches of 1000 read in order.
fn test_accuracy(t: &mut Trainer, test: &Dataset) -> cohort::Result<f64> {
    const CHUNK: usize = 1000;
    const BATCHES: usize = 10;
    let (mut images, mut labels, mut logits) =
        (vec![0f32; CHUNK * 784], vec![0i32; CHUNK], vec![0f32; CHUNK * 10]);
    let mut s = make_sampler(test, 0, 0, 1, false)?;
    let mut batch = [
        TensorMut::new("x", &mut images, &[CHUNK as i64, 784]),
        TensorMut::new("y", &mut labels, &[CHUNK as i64]),
    ];
    let mut out = [TensorMut::new("logits", &mut logits, &[CHUNK as i64, 10])];
    let mut correct = 0usize;
    for _ in 0..BATCHES {
        test.next_batch(&mut s, &mut batch)?;
        t.evaluate(&batch[..1], &mut out)?;
        let (logits, labels) = (out[0].data::<f32>().unwrap(), batch[1].data::<i32>().unwrap());
        for (i, &label) in labels.iter().enumerate() {
            let row = &logits[i * 10..i * 10 + 10];
            let mut best = 0;
            for c in 1..10 {
                if row[c] > row[best] {
                    best = c;
                }
            }
            correct += (best as i32 == label) as usize;
        }
    }
    Ok(correct as f64 / (CHUNK * BATCHES) as f64)
}

fn run(o: &Options) -> cohort::Result<()> {
    if o.threads > 0 {
        cohort::set_num_threads(o.threads as i32)?;
    }

    // The job this process belongs to: a world of one when started alone.
    let comm = Comm::from_env(&CommOptions::default())?;
    let (rank, world) = (comm.rank(), comm.size());

    let train = Dataset::fashion_mnist(Some(Path::new(&o.data)), Split::Train)?;
    let test = Dataset::fashion_mnist(Some(Path::new(&o.data)), Split::Validation)?;
    let examples = train.size()?;
    let mut sampler = make_sampler(&train, o.seed, rank, world, true)?;

    let g = build_mlp(o.batch, o.hidden)?;
    let total = if o.steps > 0 { o.steps } else { o.epochs * (examples / world as i64 / o.batch) };
    if total < 1 {
        usage_error("no steps: the batch is larger than this rank's share of the data");
    }
    let opt = Optimizer::new(&OptimizerOptions {
        kind: OptimizerKind::AdamW,
        lr: o.lr,
        schedule: Schedule::WarmupCosine,
        warmup_steps: total / 20,
        total_steps: total,
        min_lr: o.lr / 10.0,
        ..OptimizerOptions::default()
    })?;
    let to = TrainerOptions { seed: o.seed, ..TrainerOptions::default() };
    let mut t = if world == 1 {
        Trainer::new(&g, &opt, &to)?
    } else {
        let plan = Plan::new(&PlanOptions { preset: Preset::Ddp, ..PlanOptions::default() })?;
        Trainer::new_parallel(&g, &opt, &plan, &comm, &to)?
    };

    // The batch lives in this program's own arrays: the sampler fills them, the step reads them.
    let (mut bx, mut by) = (vec![0f32; (o.batch * 784) as usize], vec![0i32; o.batch as usize]);
    let mut batch =
        [TensorMut::new("x", &mut bx, &[o.batch, 784]), TensorMut::new("y", &mut by, &[o.batch])];
    if rank == 0 {
        println!(
            "cohort {} | Fashion-MNIST MLP 784-{}-10 | {} rank(s) | {} steps of batch {}",
            cohort::version(),
            o.hidden,
            world,
            total,
            o.batch
        );
    }
    let start = Instant::now();
    let mut smooth = 0f64;
    for step in 0..total {
        train.next_batch(&mut sampler, &mut batch)?;
        let loss = t.step(&batch)? as f64;
        smooth = if step == 0 { loss } else { 0.95 * smooth + 0.05 * loss };
        if rank == 0 && (step % 20 == 0 || step + 1 == total) {
            let elapsed = start.elapsed().as_secs_f64();
            let rate = (step + 1) as f64 * o.batch as f64 * world as f64 / elapsed;
            let eta = ((total - step - 1) as f64 * elapsed / (step + 1) as f64) as i64;
            print!(
                "\rstep {}/{} | loss {:.4} | {:.0} samples/s | ETA {:02}:{:02}   ",
                step + 1,
                total,
                smooth,
                rate,
                eta / 60,
                eta % 60
            );
            let _ = std::io::stdout().flush();
        }
    }
    if rank == 0 {
        println!();
    }
    let accuracy = test_accuracy(&mut t, &test)?;
    println!(
        "done in {:.1} s | test accuracy {:.2}% | final loss {:.4}",
        start.elapsed().as_secs_f64(),
        100.0 * accuracy,
        smooth
    );
    Ok(())
}

fn main() {
    let o = parse_args();
    if let Err(e) = run(&o) {
        eprintln!("error: {}", e); // "message (status name)", as the C example prints it
        exit(1);
    }
}
