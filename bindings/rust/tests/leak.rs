//! No leak over 1,000 create/destroy cycles of every handle type the safe layer owns (and of the
//! error path): the resident set, read from /proc/self/status, must stay within a small bound.
//! A test binary of its own, with one test, so no other thread's allocations blur the number.

mod common;

use cohort::{
    Attrs, Dataset, Graph, Optimizer, OptimizerOptions, Plan, PlanOptions, Preset, Sampler,
    SamplerOptions, Split, Tensor, TensorMut, Trainer, TrainerOptions,
};
use common::{batch, Lcg, FEATURES};

const CYCLES: usize = 1000;
/// A leak of one small trainer (about 10 KiB of parameters, gradients and state) per cycle would
/// add ~10 MiB; allocator noise stays far below this.
const BOUND_KIB: i64 = 4 * 1024;

fn rss_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn cycle(dataset: &Dataset, x: &[f32], y: &[i32]) {
    let mut attrs = Attrs::new().unwrap();
    attrs.set_int("transpose_b", 1).unwrap().set_string("note", "leak test").unwrap();
    let graph = common::mlp(8, 16);
    let optimizer = Optimizer::new(&OptimizerOptions::default()).unwrap();
    let mut trainer =
        Trainer::new(&graph, &optimizer, &TrainerOptions { seed: 1, ..TrainerOptions::default() })
            .unwrap();
    trainer.step(&[Tensor::new("x", x, &[8, FEATURES as i64]), Tensor::new("y", y, &[8])]).unwrap();
    let mut bias = [0f32; 16];
    trainer.get_parameter(&mut TensorMut::new("fc1.bias", &mut bias, &[16])).unwrap();
    trainer.set_checkpoint_value("cycle", 1).unwrap();
    let _plan =
        Plan::new(&PlanOptions { preset: Preset::Co2, tau: 4, ..PlanOptions::default() }).unwrap();
    let _sampler = Sampler::new(dataset, &SamplerOptions::default()).unwrap();
    // The error path: the message is copied into a Rust String and freed with the Error.
    assert!(trainer.step(&[Tensor::new("x", &x[1..], &[8, FEATURES as i64])]).is_err());
    assert!(Graph::new().unwrap().add_op("no_such_op", "n", &[], None).is_err());
}

#[test]
fn create_destroy_cycles_do_not_grow_memory() {
    let dataset = Dataset::fashion_mnist(None, Split::Validation).unwrap();
    let (x, y) = batch(&mut Lcg(1), 8);
    for _ in 0..100 {
        cycle(&dataset, &x, &y); // warm up allocator pools and lazy library state
    }
    let before = rss_kib();
    for _ in 0..CYCLES {
        cycle(&dataset, &x, &y);
    }
    let grown = rss_kib() - before;
    assert!(
        grown < BOUND_KIB,
        "RSS grew by {} KiB over {} cycles (bound {} KiB)",
        grown,
        CYCLES,
        BOUND_KIB
    );
    println!("RSS grew by {} KiB over {} cycles", grown, CYCLES);
}
