//! Collectives and data-parallel training through the crate, one process per rank: run under
//! `cohort-run -n 2 -- <this test binary>` (ctest does), or alone as a world of one (cargo test
//! does). Every rank checks its results against values it computes itself and exits non-zero on
//! the first mismatch.

mod common;

use std::time::Duration;

use cohort::{
    Comm, CommOptions, Optimizer, OptimizerOptions, Plan, PlanOptions, Preset, ReduceOp, Status,
    Tensor, TensorMut, Trainer, TrainerOptions,
};
use common::{batch, Lcg, FEATURES};

type TestResult = Result<(), Box<dyn std::error::Error>>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        let ok: bool = $cond;
        if !ok {
            return Err(format!("{}:{}: {}", file!(), line!(), format!($($msg)+)).into());
        }
    };
}

const N: usize = 1001; // odd, so no block splits evenly by accident

fn blocking_collectives(comm: &Comm) -> TestResult {
    let (rank, size) = (comm.rank(), comm.size());
    let a: Vec<f32> = (0..N).map(|i| (rank + 1) as f32 * (i % 7) as f32).collect();
    let mut sum = vec![0f32; N];
    comm.all_reduce(&a, &mut sum, ReduceOp::Sum)?;
    let ranks_sum = (size * (size + 1) / 2) as f32;
    ensure!(
        sum.iter().enumerate().all(|(i, &v)| v == ranks_sum * (i % 7) as f32),
        "all_reduce sum"
    );

    let mut avg = a.clone();
    comm.all_reduce_in_place(&mut avg, ReduceOp::Avg)?;
    ensure!(
        (avg[3] - ranks_sum * 3.0 / size as f32).abs() < 1e-4,
        "all_reduce avg gave {}",
        avg[3]
    );

    let mut top = [rank * 10, -rank];
    comm.all_reduce_in_place(&mut top, ReduceOp::Max)?;
    ensure!(top == [(size - 1) * 10, 0], "all_reduce max over i32 gave {:?}", top);

    let mut gathered = vec![0f32; N * size as usize];
    comm.all_gather(&a, &mut gathered)?;
    for r in 0..size as usize {
        ensure!(gathered[r * N + 5] == (r + 1) as f32 * 5.0, "all_gather block {}", r);
    }

    let blocks: Vec<i64> = (0..N * size as usize).map(|i| (rank as usize + i) as i64).collect();
    let mut mine = vec![0i64; N];
    comm.reduce_scatter(&blocks, &mut mine, ReduceOp::Max)?;
    ensure!(
        mine[3] == (size as usize - 1 + rank as usize * N + 3) as i64,
        "reduce_scatter gave {}",
        mine[3]
    );

    let mut token = [if rank == 0 { 4242i32 } else { 0 }];
    comm.broadcast(&mut token, 0)?;
    ensure!(token[0] == 4242, "broadcast gave {}", token[0]);

    // all_to_all: block r of every rank goes to rank r.
    let send: Vec<i32> = (0..size).flat_map(|r| [rank * 100 + r; 3]).collect();
    let mut received = vec![0i32; send.len()];
    comm.all_to_all(&send, &mut received)?;
    for r in 0..size {
        ensure!(received[(r * 3) as usize] == r * 100 + rank, "all_to_all block {}", r);
    }
    comm.barrier()?;
    Ok(())
}

/// Operations in flight together inside a scope, a polled Work, and a leaked one that the scope
/// still waits for before its buffers are given back.
fn async_collectives(comm: &Comm) -> TestResult {
    let (rank, size) = (comm.rank(), comm.size());
    let a = vec![1f32; N];
    let (mut sum, mut ring_in, mut forgotten) = (vec![0f32; N], [-1i32], vec![rank as f32; 8]);
    let ring_out = [rank];
    comm.scope(|s| -> TestResult {
        let mut reduce = s.all_reduce(&a, &mut sum, ReduceOp::Sum)?;
        for _ in 0..1000 {
            if reduce.test()? {
                break;
            }
        }
        let mut bcast = s.broadcast(&mut forgotten, 0)?;
        bcast.wait_for(Duration::from_secs(30))?;
        std::mem::forget(bcast); // safe: the scope waits for it and releases it
        if size >= 2 {
            // A ring: receive from the left, send to the right, both in flight at once.
            let recv = s.recv(&mut ring_in, (rank + size - 1) % size)?;
            let send = s.send(&ring_out, (rank + 1) % size)?;
            send.wait()?;
            recv.wait()?;
        }
        reduce.wait()?;
        Ok(())
    })?;
    ensure!(sum.iter().all(|&v| v == size as f32), "async all_reduce");
    ensure!(forgotten.iter().all(|&v| v == 0.0), "broadcast from rank 0 gave {:?}", forgotten);
    if size >= 2 {
        ensure!(ring_in[0] == (rank + size - 1) % size, "ring received {}", ring_in[0]);
    }

    // Lengths the C API cannot check are checked by the binding.
    let mut wrong = vec![0f32; N - 1];
    let e = comm.all_reduce(&a, &mut wrong, ReduceOp::Sum).unwrap_err();
    ensure!(
        e.status() == Status::InvalidArgument && e.message().contains("all_reduce"),
        "length check: {}",
        e
    );
    let e = comm.all_gather(&a, &mut wrong).unwrap_err();
    ensure!(e.status() == Status::InvalidArgument, "all_gather length check: {}", e);

    // Even and odd ranks form two communicators.
    let half = comm.split(rank % 2, rank)?.ok_or("split gave no communicator")?;
    ensure!(
        half.rank() == rank / 2 && half.size() == (size + 1 - rank % 2) / 2,
        "split: {:?}",
        half
    );
    let mut one = [1i32];
    half.all_reduce_in_place(&mut one, ReduceOp::Sum)?;
    ensure!(one[0] == half.size(), "all_reduce on the split gave {}", one[0]);
    ensure!(comm.status().is_ok() && comm.failed_rank().is_none(), "communicator status");

    // After an abort every operation fails, and the failure is sticky.
    half.abort()?;
    let e = half.barrier().unwrap_err();
    let sticky = half.status().unwrap_err();
    ensure!(sticky.status() == e.status(), "abort: barrier gave {}, status {}", e, sticky);
    ensure!(comm.status().is_ok(), "aborting the split must leave the parent alone");
    Ok(())
}

/// Collectives in registered memory (Comm::alloc), large enough to run in place where the ranks
/// share a host (from 256 KiB), checked against sums computed here; allocation and free in the
/// same order on every rank, explicitly and by drop.
fn registered_memory(comm: &Comm) -> TestResult {
    const M: usize = 1 << 17; // f32 elements per rank: 512 KiB
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let value = |r: usize, i: usize| ((r + 1) * (i % 13)) as f32;
    let ranks_sum = (size * (size + 1) / 2) as f32;

    let mut sums = comm.alloc::<f32>(M)?;
    ensure!(sums.len() == M && sums.iter().all(|&v| v == 0.0), "alloc is not zeroed");
    for (i, v) in sums.iter_mut().enumerate() {
        *v = value(rank, i);
    }
    comm.all_reduce_in_place(&mut sums, ReduceOp::Sum)?;
    for (i, &v) in sums.iter().enumerate() {
        ensure!(v == ranks_sum * (i % 13) as f32, "registered all_reduce [{}] = {}", i, v);
    }

    // From one registered buffer into another, i64 maximum.
    let mut ints = comm.alloc::<i64>(M / 2)?;
    let mut top = comm.alloc::<i64>(M / 2)?;
    for (i, v) in ints.iter_mut().enumerate() {
        *v = (rank * M + i) as i64 * if i % 2 == 0 { 1 } else { -1 };
    }
    comm.all_reduce(&ints, &mut top, ReduceOp::Max)?;
    for (i, &v) in top.iter().enumerate() {
        let want = if i % 2 == 0 { ((size - 1) * M + i) as i64 } else { -(i as i64) };
        ensure!(v == want, "registered all_reduce max [{}] = {}, expected {}", i, v, want);
    }

    // Reduce-scatter: size x M in, this rank's block of the sum out.
    let mut blocks = comm.alloc::<f32>(size * M)?;
    let mut part = comm.alloc::<f32>(M)?;
    for (j, v) in blocks.iter_mut().enumerate() {
        *v = value(rank, j);
    }
    comm.reduce_scatter(&blocks, &mut part, ReduceOp::Sum)?;
    for (i, &v) in part.iter().enumerate() {
        let want = ranks_sum * ((rank * M + i) % 13) as f32;
        ensure!(v == want, "registered reduce_scatter [{}] = {}, expected {}", i, v, want);
    }

    // All-gather of the blocks back, asynchronously in a scope together with an all-reduce.
    let mut gathered = comm.alloc::<f32>(size * M)?;
    comm.scope(|s| -> TestResult {
        let gather = s.all_gather(&part, &mut gathered)?;
        let reduce = s.all_reduce_in_place(&mut sums, ReduceOp::Max)?;
        gather.wait()?;
        reduce.wait()?;
        Ok(())
    })?;
    for (j, &v) in gathered.iter().enumerate() {
        ensure!(v == ranks_sum * (j % 13) as f32, "registered all_gather [{}] = {}", j, v);
    }
    ensure!(sums[12] == ranks_sum * 12.0, "registered all_reduce max gave {}", sums[12]);

    // Every rank frees these two here, then drops the rest in reverse order at the end.
    top.free()?;
    ints.free()?;
    let mut again = comm.alloc::<f32>(M)?; // allocation after frees lines up too
    again.fill(1.0);
    comm.all_reduce_in_place(&mut again, ReduceOp::Sum)?;
    ensure!(again.iter().all(|&v| v == size as f32), "all_reduce after free gave {}", again[0]);
    Ok(())
}

/// DDP over the ranks: every rank feeds its own shard and all end with the same parameters; a
/// plan whose degree does not divide the world is INVALID_PLAN.
fn data_parallel_training(comm: &Comm) -> TestResult {
    let (rank, size) = (comm.rank(), comm.size());
    let graph = common::mlp(16, 16);
    let optimizer = Optimizer::new(&OptimizerOptions { lr: 0.2, ..OptimizerOptions::default() })?;
    let options = TrainerOptions { seed: 5, ..TrainerOptions::default() };

    let bad = Plan::new(&PlanOptions { data_parallel: size + 1, ..PlanOptions::default() })?;
    let e = Trainer::new_parallel(&graph, &optimizer, &bad, comm, &options).unwrap_err();
    ensure!(e.status() == Status::InvalidPlan, "degree {} over {} ranks: {}", size + 1, size, e);

    let plan = Plan::new(&PlanOptions { preset: Preset::Ddp, ..PlanOptions::default() })?;
    let mut trainer = Trainer::new_parallel(&graph, &optimizer, &plan, comm, &options)?;
    let mut rng = Lcg(100 + rank as u64); // each rank its own shard
    let mut losses = Vec::new();
    for _ in 0..40 {
        let (x, y) = batch(&mut rng, 16);
        losses.push(
            trainer.step(&[
                Tensor::new("x", &x, &[16, FEATURES as i64]),
                Tensor::new("y", &y, &[16]),
            ])?,
        );
    }
    ensure!(
        losses[35..].iter().sum::<f32>() < losses[..5].iter().sum::<f32>(),
        "loss did not fall: {:?}",
        losses
    );
    let stats = trainer.parallel_stats()?;
    ensure!(stats.rounds == 40 && stats.buckets >= 1, "parallel stats {:?}", stats);
    ensure!(stats.parameter_gathers == 0, "no ZeRO 3: {:?}", stats);
    trainer.gather_parameters()?; // a no-op without ZeRO 3
    ensure!(!trainer.average_replicas()?, "DDP's replicas are equal: nothing to average");

    // Every rank saves its own file with the outer state, and loads it back.
    let path = common::temp_path(&format!("rank{}.ckpt", rank));
    trainer.save_parallel_checkpoint(&path)?;
    trainer.load_parallel_checkpoint(&path)?;
    std::fs::remove_file(&path)?;
    ensure!(trainer.stats()?.step == 40, "step after reloading the checkpoint");

    let mut weights = vec![0f32; 16 * FEATURES];
    trainer.get_parameter(&mut TensorMut::new(
        "fc1.weight",
        &mut weights,
        &[16, FEATURES as i64],
    ))?;
    let mut all = vec![0f32; weights.len() * size as usize];
    comm.all_gather(&weights, &mut all)?;
    for r in 1..size as usize {
        ensure!(
            all[r * weights.len()..(r + 1) * weights.len()] == all[..weights.len()],
            "rank {} diverged",
            r
        );
    }
    Ok(())
}

/// co2's round shape, outer synchronisation and the split of its waits reach Rust.
fn co2_stats(comm: &Comm) -> TestResult {
    let graph = common::mlp(16, 16);
    let optimizer = Optimizer::new(&OptimizerOptions { lr: 0.2, ..OptimizerOptions::default() })?;
    let options = TrainerOptions { seed: 5, ..TrainerOptions::default() };
    let plan = Plan::new(&PlanOptions {
        preset: Preset::Co2,
        tau: 2,
        outer_fragments: 2,
        ..PlanOptions::default()
    })?;
    let mut trainer = Trainer::new_parallel(&graph, &optimizer, &plan, comm, &options)?;
    let mut rng = Lcg(200 + comm.rank() as u64);
    for _ in 0..8 {
        let (x, y) = batch(&mut rng, 16);
        trainer
            .step(&[Tensor::new("x", &x, &[16, FEATURES as i64]), Tensor::new("y", &y, &[16])])?;
    }
    let s = trainer.parallel_stats()?;
    ensure!(s.rounds == 4 && s.tau == 2 && s.overlap_steps == 1, "round shape {:?}", s);
    ensure!(
        s.outer_fragments == 2 && s.outer_syncs == 8 && s.outer_sync_bytes > 0,
        "outer syncs {:?}",
        s
    );
    ensure!((0.0..=1.0).contains(&s.outer_hidden_fraction), "outer hidden {:?}", s);
    ensure!(s.shard_group == 1 && s.grad_keep == 1.0, "defaults {:?}", s);
    ensure!(
        s.outer_shared_wait_seconds >= 0.0 && s.outer_shared_wait_seconds <= s.wait_seconds,
        "shared waits {:?}",
        s
    );
    Ok(())
}

fn main() {
    // Several ranks share the machine's cores: one thread each.
    if let Err(e) = cohort::set_num_threads(1) {
        eprintln!("multirank: {}", e);
        std::process::exit(1);
    }
    let comm = match Comm::from_env(&CommOptions { timeout_ms: 20_000, connect_timeout_ms: 30_000 })
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("multirank: joining the job failed: {}", e);
            std::process::exit(1);
        }
    };
    let rank = comm.rank();
    for (name, test) in [
        ("blocking collectives", blocking_collectives as fn(&Comm) -> TestResult),
        ("async collectives", async_collectives),
        ("registered memory", registered_memory),
        ("data-parallel training", data_parallel_training),
        ("co2 statistics", co2_stats),
    ] {
        if let Err(e) = test(&comm) {
            eprintln!("rank {}: {} FAILED: {}", rank, name, e);
            std::process::exit(1);
        }
    }
    println!(
        "rank {} of {}: collectives, registered memory and data-parallel training ok",
        rank,
        comm.size()
    );
}
