//! Every error path ends as a cohort::Error with the right Status and the C library's message:
//! bad shapes, wrong-size slices, NULL and destroyed handles (through the raw FFI, which safe
//! code cannot reach), invalid plans, corrupt files, unknown operators, and this binding's own
//! checks.

mod common;

use std::ptr;

use cohort::{
    check, device_usable, sys, Attrs, Comm, CommOptions, DType, Dataset, Device, Error, GptOptions,
    Graph, Initializer, Optimizer, OptimizerOptions, Plan, PlanOptions, Preset, ReduceOp, Sampler,
    SamplerOptions, Split, Status, SyncMode, Tensor, TensorMut, Trainer, TrainerOptions,
};
use common::{batch, trainer, Lcg, CLASSES, FEATURES};

/// Asserts the status and that the message contains every fragment.
fn expect_error<T: std::fmt::Debug>(
    result: cohort::Result<T>,
    status: Status,
    fragments: &[&str],
) -> Error {
    let e = result.expect_err("the call should have failed");
    assert_eq!(e.status(), status, "message: {}", e.message());
    for f in fragments {
        assert!(e.message().contains(f), "message {:?} should contain {:?}", e.message(), f);
    }
    e
}

#[test]
fn bad_shape_is_shape_mismatch() {
    let mut g = Graph::new().unwrap();
    let x = g.add_input("x", DType::F32, &[64, 300]).unwrap();
    let w = g.add_parameter("w", DType::F32, &[64, 10], &Initializer::zeros()).unwrap();
    expect_error(
        g.add_op("matmul", "fc2", &[x, w], None),
        Status::ShapeMismatch,
        &["matmul 'fc2'", "[64, 10]"],
    );
    // The graph is unchanged: the name is still free.
    assert_eq!(expect_error(g.find("fc2"), Status::NotFound, &["fc2"]).status(), Status::NotFound);
}

#[test]
fn unknown_operator_is_not_found() {
    let mut g = Graph::new().unwrap();
    let x = g.add_input("x", DType::F32, &[2, 2]).unwrap();
    expect_error(g.add_op("no_such_op", "n", &[x], None), Status::NotFound, &["no_such_op"]);
    let mut attrs = Attrs::new().unwrap();
    attrs.set_floats("not_an_attribute", &[1.0, 2.0]).unwrap();
    expect_error(
        g.add_op("relu", "r", &[x], Some(&attrs)),
        Status::InvalidArgument,
        &["not_an_attribute"],
    );
}

#[test]
fn wrong_size_slices_are_reported_by_the_library() {
    let mut t = trainer(8, 4, 1);
    let (x, y) = batch(&mut Lcg(1), 8);
    // One element short: the library compares the slice's bytes with the shape.
    let short = &x[..x.len() - 1];
    expect_error(
        t.step(&[Tensor::new("x", short, &[8, FEATURES as i64]), Tensor::new("y", &y, &[8])]),
        Status::InvalidArgument,
        &["cohort_trainer_step", "'x'", "bytes"],
    );
    // The right length under a shape the graph does not declare.
    expect_error(
        t.step(&[Tensor::new("x", &x, &[4, 2 * FEATURES as i64]), Tensor::new("y", &y, &[8])]),
        Status::ShapeMismatch,
        &["x"],
    );
    // A wrong dtype for a label input.
    let yf = vec![0f32; 8];
    expect_error(
        t.step(&[Tensor::new("x", &x, &[8, FEATURES as i64]), Tensor::new("y", &yf, &[8])]),
        Status::ShapeMismatch,
        &["y"],
    );
    assert_eq!(t.stats().unwrap().step, 0, "no failed step may change the trainer");
}

/// Issue #25: a slice whose element type is not the input's dtype is refused naming the input,
/// the dtype expected and the one given (u8 or f64 slices do not compile: see `Element`).
#[test]
fn element_types_other_than_the_inputs_are_refused_by_name() {
    let mut t = trainer(8, 4, 1);
    let (x, y) = batch(&mut Lcg(1), 8);
    let x_as_i32: Vec<i32> = x.iter().map(|v| *v as i32).collect();
    let x_shape = [8, FEATURES as i64];
    expect_error(
        t.step(&[Tensor::new("x", &x_as_i32, &x_shape), Tensor::new("y", &y, &[8])]),
        Status::ShapeMismatch,
        &["cohort_trainer_step", "input 'x' has dtype i32, expected f32"],
    );
    let y_as_i64: Vec<i64> = y.iter().map(|v| *v as i64).collect();
    expect_error(
        t.step(&[Tensor::new("x", &x, &x_shape), Tensor::new("y", &y_as_i64, &[8])]),
        Status::ShapeMismatch,
        &["input 'y' has dtype i64, expected i32"],
    );
    let mut logits = vec![0i32; 8 * CLASSES];
    expect_error(
        t.evaluate(
            &[Tensor::new("x", &x, &x_shape)],
            &mut [TensorMut::new("logits", &mut logits, &[8, CLASSES as i64])],
        ),
        Status::ShapeMismatch,
        &["cohort_trainer_evaluate", "logits", "i32"],
    );
    assert_eq!(t.stats().unwrap().step, 0, "no refused step may change the trainer");
}

#[test]
fn null_and_destroyed_handles_are_invalid_handle() {
    // NULL: the library names the function and the argument, and check() maps it.
    // SAFETY: the library accepts NULL handles and reports them.
    let status =
        unsafe { sys::cohort_trainer_step(ptr::null_mut(), ptr::null(), 0, ptr::null_mut()) };
    assert_eq!(status, sys::cohort_status::COHORT_ERR_INVALID_HANDLE);
    let e = expect_error(check(status), Status::InvalidHandle, &[]);
    assert_eq!(e.message(), "cohort_trainer_step: trainer is NULL");

    // Destroyed: the handle table no longer knows the pointer (it is compared, never read).
    let g = Graph::new().unwrap();
    let raw = g.as_raw();
    drop(g);
    // SAFETY: the library checks handles against its table of live objects first.
    let status = unsafe { sys::cohort_graph_mark_output(raw, 0) };
    expect_error(
        check(status),
        Status::InvalidHandle,
        &["cohort_graph_mark_output", "not a live cohort_graph"],
    );

    // A handle of another type.
    let opt = Optimizer::new(&OptimizerOptions::default()).unwrap();
    // SAFETY: as above; the table records each handle's type.
    let status = unsafe { sys::cohort_graph_set_loss(opt.as_raw().cast(), 0) };
    expect_error(check(status), Status::InvalidHandle, &["cohort_optimizer"]);
    assert!(check(sys::cohort_status::COHORT_OK).is_ok());
}

#[test]
fn invalid_plans() {
    let e = expect_error(
        Plan::new(&PlanOptions { tau: 0, ..PlanOptions::default() }),
        Status::InvalidPlan,
        &["tau"],
    );
    assert!(e.to_string().ends_with("(invalid plan)"), "{}", e);
    expect_error(
        Plan::new(&PlanOptions { outer_momentum: 1.0, ..PlanOptions::default() }),
        Status::InvalidPlan,
        &["momentum"],
    );
    expect_error(
        Plan::new(&PlanOptions { inner_noise_scaling: true, ..PlanOptions::default() }),
        Status::InvalidPlan,
        &["inner_noise_scaling applies to local steps"],
    );
    expect_error(
        Plan::new(&PlanOptions {
            preset: Preset::Co2,
            tau: 2,
            average_inner_state: true,
            ..PlanOptions::default()
        }),
        Status::InvalidPlan,
        &["average_inner_state applies to localsgd's blocking round ends"],
    );
    Plan::new(&PlanOptions {
        preset: Preset::DiLoCo,
        tau: 4,
        average_inner_state: true,
        ..PlanOptions::default()
    })
    .expect("diloco averages its inner state at round ends");
    let co2 = PlanOptions {
        preset: Preset::Co2,
        tau: 2,
        inner_noise_scaling: true,
        ..PlanOptions::default()
    };
    Plan::new(&co2).expect("co2 takes inner noise scaling");
    assert_eq!((PlanOptions::default().tensor_x, PlanOptions::default().tensor_y), (1, 1));
    expect_error(
        Plan::new(&PlanOptions { tensor_y: 0, ..PlanOptions::default() }),
        Status::InvalidPlan,
        &["plan: tensor_y = 0 must be in 1..65536"],
    );
    expect_error(
        Plan::new(&PlanOptions { tensor_x: 0, ..PlanOptions::default() }),
        Status::InvalidPlan,
        &["plan: tensor_x = 0 must be in 1..65536"],
    );
    Plan::new(&PlanOptions { tensor_x: 2, tensor_y: 2, tensor_z: 2, ..PlanOptions::default() })
        .expect("AxoNN's 3D grid (fitted to a world when the trainer is made)");
    expect_error(
        Plan::new(&PlanOptions { sequence_parallel: 1, ..PlanOptions::default() }),
        Status::InvalidPlan,
        &["plan: sequence parallelism splits the tokens over tensor_y, which is 1"],
    );
    Plan::new(&PlanOptions { tensor_y: 2, sequence_parallel: 2, ..PlanOptions::default() })
        .expect("all-to-all sequence parallelism over tensor_y 2");
    Plan::new(&PlanOptions { tensor_y: 2, tensor_overlap_off: true, ..PlanOptions::default() })
        .expect("a plan with tensor_y 2 (fitted to a world when the trainer is made)");
    assert!(!PlanOptions::default().activation_checkpointing);
    Plan::new(&PlanOptions { activation_checkpointing: true, ..PlanOptions::default() })
        .expect("a plan with activation checkpointing (the model is checked when the trainer is made)");
    // Pipeline parallelism: 0 keeps the defaults; each bad value named.
    let d = PlanOptions::default();
    assert_eq!((d.pipeline_stages, d.pipeline_chunks, d.micro_batches, d.pipeline_schedule), (1, 1, 1, 1));
    Plan::new(&PlanOptions { pipeline_stages: 0, pipeline_chunks: 0, micro_batches: 0, ..d })
        .expect("0 means the defaults");
    expect_error(
        Plan::new(&PlanOptions { pipeline_stages: -1, ..d }),
        Status::InvalidPlan,
        &["plan: pipeline_stages = -1 must be in [1, 65536]"],
    );
    expect_error(
        Plan::new(&PlanOptions { micro_batches: -2, ..d }),
        Status::InvalidPlan,
        &["plan: micro_batches = -2 must be >= 1"],
    );
    expect_error(
        Plan::new(&PlanOptions { pipeline_stages: 2, pipeline_schedule: 5, ..d }),
        Status::InvalidPlan,
        &["plan: unknown pipeline_schedule 5"],
    );
    expect_error(
        Plan::new(&PlanOptions { pipeline_stages: 2, pipeline_chunks: 2, ..d }),
        Status::InvalidPlan,
        &["plan: pipeline_chunks = 2 needs the interleaved schedule"],
    );
    Plan::new(&PlanOptions { pipeline_stages: 2, pipeline_chunks: 2, micro_batches: 4, pipeline_schedule: 2, ..d })
        .expect("the interleaved schedule over 2 chunks per rank");
    let two = PlanOptions { pipeline_stages: 2, ..d };
    expect_error(
        Plan::with_pipeline_cuts(&two, &["fc1", "fc2"]),
        Status::InvalidPlan,
        &["plan: pipeline_cuts names 2 node(s); 2 stages need 1"],
    );
    expect_error(
        Plan::with_pipeline_cuts(&two, &["fc2", ""]),
        Status::InvalidPlan,
        &["plan: pipeline_cuts 'fc2,' has an empty name"],
    );
    Plan::with_pipeline_cuts(&two, &["fc2"]).expect("one cut for two stages (the names are checked by the trainer)");
    Plan::with_pipeline_cuts(&two, &[]).expect("no names: balanced");
    expect_error(
        Plan::new(&PlanOptions { outer_bits: 6, ..co2 }),
        Status::InvalidPlan,
        &["outer bits = 6"],
    );
    expect_error(Plan::new(&PlanOptions { overlap_steps: 3, ..co2 }), Status::InvalidPlan, &["overlap"]);
    Plan::new(&PlanOptions { tau: 4, overlap_steps: -1, outer_bits: 4, ..co2 }).expect("co2 takes overlap auto and 4 bits");
    expect_error(
        Plan::new(&PlanOptions { outer_fragments: 3, ..co2 }),
        Status::InvalidPlan,
        &["plan: outer_fragments = 3 must be <= tau = 2"],
    );
    Plan::new(&PlanOptions { tau: 4, outer_fragments: 4, ..co2 })
        .expect("co2 streams over 4 fragments of tau 4");
    expect_error(
        Plan::new(&PlanOptions { shard_group: 2, ..co2 }),
        Status::InvalidPlan,
        &["plan: shard_group = 2 runs ZeRO over each replica's ranks"],
    );
    Plan::new(&PlanOptions { zero_stage: 3, shard_group: 2, tensor_y: 2, ..co2 })
        .expect("co2 takes shard groups over the data axis of a tensor grid");
    Plan::new(&PlanOptions { zero_stage: 3, shard_group: 2, ..co2 })
        .expect("co2 takes shard groups with ZeRO 3, its low-bit messages and noise scaling");
    expect_error(
        Plan::new(&PlanOptions { grad_keep: 1.5, ..PlanOptions::default() }),
        Status::InvalidPlan,
        &["plan: grad_keep = 1.5 must be in (0, 1]"],
    );
    expect_error(
        Plan::new(&PlanOptions { grad_keep: 0.1, ..co2 }),
        Status::Unsupported,
        &["plan: grad_keep = 0.1 compresses the sync mode's gradients"],
    );
    Plan::new(&PlanOptions { grad_keep: 0.1, ..PlanOptions::default() }).expect("ddp takes top-k gradients");
    expect_error(
        Plan::new(&PlanOptions {
            mode: SyncMode::Co2,
            tau: 2,
            zero_stage: 3,
            ..PlanOptions::default()
        }),
        Status::Unsupported,
        &["needs the sync (DDP) mode"],
    );
}

#[test]
fn corrupt_and_missing_files() {
    let mut t = trainer(8, 4, 2);
    let path = common::temp_path("corrupt.ckpt");
    t.save_checkpoint(&path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    // Damage the middle of the file, then separately truncate it: both fail verification.
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    expect_error(t.load_checkpoint(&path), Status::Corrupt, &[]);
    std::fs::write(&path, &bytes[..middle]).unwrap();
    expect_error(t.load_checkpoint(&path), Status::Corrupt, &[]);
    std::fs::remove_file(&path).unwrap();
    // Still usable after the failed loads.
    let (x, y) = batch(&mut Lcg(3), 8);
    t.step(&[Tensor::new("x", &x, &[8, FEATURES as i64]), Tensor::new("y", &y, &[8])]).unwrap();

    expect_error(
        t.load_checkpoint("/nonexistent/dir/ckpt"),
        Status::Io,
        &["/nonexistent/dir/ckpt"],
    );
    expect_error(
        t.save_checkpoint("/nonexistent/dir/ckpt"),
        Status::Io,
        &["/nonexistent/dir/ckpt"],
    );

    let graph_path = common::temp_path("corrupt.graph");
    std::fs::write(&graph_path, b"this is not a graph file").unwrap();
    expect_error(Graph::load(&graph_path), Status::Corrupt, &[]);
    std::fs::remove_file(&graph_path).unwrap();
    let nowhere = std::path::Path::new("/nonexistent");
    expect_error(
        Dataset::fashion_mnist(Some(nowhere), Split::Train),
        Status::Io,
        &["/nonexistent"],
    );
    expect_error(Dataset::brown(nowhere, 0.1, Split::Train, 64), Status::Io, &[]);

    // A sampler for more ranks than examples, or a rank outside its world.
    let test = Dataset::fashion_mnist(None, Split::Validation).unwrap();
    let options = SamplerOptions { rank: 2, world: 2, ..SamplerOptions::default() };
    expect_error(Sampler::new(&test, &options), Status::InvalidArgument, &["rank"]);
    let mut sampler = Sampler::new(&test, &SamplerOptions::default()).unwrap();
    expect_error(sampler.set_position(-1, 0), Status::InvalidArgument, &[]);
    // next_batch takes exactly two tensors.
    let mut images = vec![0f32; 784];
    expect_error(
        test.next_batch(&mut sampler, &mut [TensorMut::new("x", &mut images, &[1, 784])]),
        Status::InvalidArgument,
        &[],
    );
    assert_eq!(sampler.position().unwrap(), (0, 0));
}

#[test]
fn bad_options_name_the_field() {
    expect_error(
        Graph::gpt(&GptOptions { heads: 3, width: 256, ..GptOptions::default() }),
        Status::InvalidArgument,
        &["heads"],
    );
    expect_error(
        Optimizer::new(&OptimizerOptions { lr: -1.0, ..OptimizerOptions::default() }),
        Status::InvalidArgument,
        &["lr"],
    );
    expect_error(cohort::set_num_threads(0), Status::InvalidArgument, &[]);
    let mut t = trainer(8, 4, 1);
    expect_error(t.checkpoint_value("never.set"), Status::NotFound, &["never.set"]);
    expect_error(t.set_checkpoint_value("", 1), Status::InvalidArgument, &[]);
    expect_error(t.parallel_stats(), Status::InvalidState, &[]);
    expect_error(t.save_parallel_checkpoint(common::temp_path("never")), Status::InvalidState, &[]);
    // A graph without a loss cannot be trained.
    let mut g = Graph::new().unwrap();
    g.add_input("x", DType::F32, &[1]).unwrap();
    assert!(Trainer::new(&g, &common::adamw(0.1), &TrainerOptions::default()).is_err());
}

#[test]
fn devices_and_why_they_cannot_be_used() {
    assert_eq!(device_usable(Device::Cpu).unwrap(), (true, String::new()));
    assert_eq!(TrainerOptions::default().device, Device::Cpu);
    let graph = common::mlp(8, 4);
    let optimizer = common::adamw(1e-2);
    let (x, y) = batch(&mut Lcg(1), 8);
    let inputs = [Tensor::new("x", &x, &[8, FEATURES as i64]), Tensor::new("y", &y, &[8])];
    let on_cpu = TrainerOptions { seed: 1, device: Device::Cpu, ..TrainerOptions::default() };
    Trainer::new(&graph, &optimizer, &on_cpu).unwrap().step(&inputs).unwrap();

    let on_cuda = TrainerOptions { device: Device::Cuda, ..on_cpu };
    let (usable, reason) = device_usable(Device::Cuda).unwrap();
    if usable {
        assert_eq!(reason, "");
        let mut t = Trainer::new(&graph, &optimizer, &on_cuda).expect("a trainer on the GPU");
        assert!(t.step(&inputs).unwrap().is_finite());
    } else {
        assert!(!reason.is_empty());
        let e = expect_error(
            Trainer::new(&graph, &optimizer, &on_cuda),
            Status::Unsupported,
            &["cohort_trainer_create", &reason],
        );
        assert!(e.message().to_lowercase().contains("cuda"), "{}", e);
    }
    // Data parallelism on the GPU: runs where the device can be used, refused with the reason
    // elsewhere.
    let comm = Comm::from_env(&CommOptions::default()).unwrap();
    let plan = Plan::new(&PlanOptions::default()).unwrap();
    if usable {
        let mut t = Trainer::new_parallel(&graph, &optimizer, &plan, &comm, &on_cuda)
            .expect("a data-parallel trainer on the GPU");
        assert!(t.step(&inputs).unwrap().is_finite());
    } else {
        let e = expect_error(
            Trainer::new_parallel(&graph, &optimizer, &plan, &comm, &on_cuda),
            Status::Unsupported,
            &["cohort_trainer_create_parallel", &reason],
        );
        assert!(e.message().to_lowercase().contains("cuda"), "{}", e);
    }

    // Micro-batches on one rank (gradient accumulation) train and are reported; a count that
    // does not divide the batch is refused naming it.
    let micro = Plan::new(&PlanOptions { micro_batches: 2, pipeline_schedule: 0, ..PlanOptions::default() }).unwrap();
    let mut t = Trainer::new_parallel(&graph, &optimizer, &micro, &comm, &on_cpu).unwrap();
    assert!(t.step(&inputs).unwrap().is_finite());
    let stats = t.stats().unwrap();
    assert_eq!((stats.step, stats.micro_batches), (1, 2));
    assert!(stats.pipeline_busy_seconds > 0.0 && stats.pipeline_bubble_fraction == 0.0, "{:?}", stats); // one stage: no wait
    assert_eq!(t.pipeline_stages().unwrap(), ""); // no pipeline stages
    let three = Plan::new(&PlanOptions { micro_batches: 3, ..PlanOptions::default() }).unwrap();
    expect_error(
        Trainer::new_parallel(&graph, &optimizer, &three, &comm, &on_cpu),
        Status::InvalidPlan,
        &["plan: micro_batches = 3 does not divide the batch 8"],
    );

    // A value that is no device: only through the raw layer, which the library checks.
    let mut usable = 0i32;
    // SAFETY: usable is valid for a write; a NULL reason is allowed.
    let status = unsafe {
        sys::cohort_device_usable(sys::cohort_device(7), &mut usable, ptr::null_mut(), 0)
    };
    expect_error(
        check(status),
        Status::InvalidArgument,
        &["cohort_device_usable", "device = 7 is not a cohort_device"],
    );
}

#[test]
fn the_binding_checks_what_c_cannot_see() {
    let mut g = Graph::new().unwrap();
    expect_error(g.add_input("x\0y", DType::F32, &[1]), Status::InvalidArgument, &["NUL"]);
    let mut t = trainer(8, 4, 1);
    let (x, y) = batch(&mut Lcg(1), 8);
    expect_error(
        t.step(&[Tensor::new("x\0", &x, &[8, FEATURES as i64]), Tensor::new("y", &y, &[8])]),
        Status::InvalidArgument,
        &["NUL"],
    );
}

#[test]
fn statuses_and_errors_behave_as_values() {
    for code in 1..=14u32 {
        let status = Status::from_raw(sys::cohort_status(code)).unwrap();
        assert_eq!(status.to_raw(), sys::cohort_status(code));
        assert!(!status.name().is_empty());
    }
    assert_eq!(Status::from_raw(sys::cohort_status::COHORT_OK), None);
    assert_eq!(Status::from_raw(sys::cohort_status(99)), Some(Status::Other(99)));
    assert_eq!(Status::ShapeMismatch.name(), "shape mismatch");
    assert_eq!(Status::from_raw(sys::cohort_status::COHORT_ERR_NON_FINITE), Some(Status::NonFinite));
    assert_eq!(Status::NonFinite.name(), "non-finite values");
    // Usable with ? in functions returning Box<dyn Error>.
    fn boxed() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Plan::new(&PlanOptions { tau: 0, ..PlanOptions::default() })?;
        Ok(())
    }
    assert!(boxed().unwrap_err().to_string().contains("tau"));
}

#[test]
fn registered_memory_mistakes() {
    let comm = Comm::from_env(&CommOptions::default()).unwrap();
    expect_error(
        comm.alloc::<f32>(0),
        Status::InvalidArgument,
        &["cohort_comm_mem_alloc", "0 bytes"],
    );
    expect_error(
        comm.alloc::<i64>(usize::MAX / 4),
        Status::InvalidArgument,
        &["Comm::alloc", "overflow"],
    );
    expect_error(comm.alloc::<f32>(1 << 50), Status::InvalidArgument, &["more than any host has"]);

    // Zeroed, usable as a slice and in collectives, wrong lengths caught as for any slice.
    let mut a = comm.alloc::<i32>(5).unwrap();
    assert_eq!(&a[..], &[0; 5]);
    a.copy_from_slice(&[1, 2, 3, 4, 5]);
    comm.all_reduce_in_place(&mut a, ReduceOp::Sum).unwrap();
    let mut short = comm.alloc::<i32>(4).unwrap();
    expect_error(
        comm.all_reduce(&a, &mut short, ReduceOp::Sum),
        Status::InvalidArgument,
        &["all_reduce"],
    );
    assert!(format!("{:?}", short).starts_with("Registered(4 x I32 at "), "{:?}", short);
    short.free().unwrap();

    // Free twice and use after free do not compile (see Comm::alloc's doc tests); the library
    // itself reports a second free of the same pointer, which only the raw layer can make.
    let raw = a.as_ptr() as *mut std::os::raw::c_void;
    a.free().unwrap();
    // SAFETY: the library looks the pointer up among its allocations; it never dereferences it.
    let status = unsafe { sys::cohort_comm_mem_free(comm.as_raw(), raw) };
    expect_error(
        check(status),
        Status::InvalidArgument,
        &["cohort_comm_mem_free", "freed already"],
    );

    // After the communicator failed, allocating reports the failure; freeing still succeeds
    // (the memory goes with the communicator), and so does dropping.
    let kept = comm.alloc::<f32>(16).unwrap();
    let dropped = comm.alloc::<f32>(16).unwrap();
    comm.abort().unwrap();
    let sticky = comm.status().unwrap_err();
    let e = comm.alloc::<f32>(16).unwrap_err();
    assert_eq!(e.status(), sticky.status(), "{}", e);
    kept.free().unwrap();
    drop(dropped);
}

#[test]
fn fence_plans_and_link_probe() {
    let d = PlanOptions::default();
    assert_eq!((d.fence, d.fence_compression, d.fence_min_keep), (false, true, 0.0));
    // Pipeline keep: one share per cut, each in (0, 1]; INVALID_PLAN naming "pipeline keep".
    let two = PlanOptions { pipeline_stages: 2, ..d };
    Plan::with_pipeline(&two, &[], &[0.1]).expect("one share for the one cut of two stages");
    Plan::with_pipeline(&PlanOptions { pipeline_stages: 3, ..d }, &[], &[1.0, 1e-4])
        .expect("two cuts");
    Plan::with_pipeline(&two, &["fc2"], &[]).expect("no shares: no cut compressed");
    expect_error(
        Plan::with_pipeline(&two, &[], &[1.5]),
        Status::InvalidPlan,
        &["cohort_plan_create", "pipeline keep of cut 0 is 1.5"],
    );
    expect_error(
        Plan::with_pipeline(&two, &[], &[f64::NAN]),
        Status::InvalidPlan,
        &["pipeline keep"],
    );
    expect_error(
        Plan::with_pipeline(&two, &[], &[0.5, 0.5]),
        Status::InvalidPlan,
        &["pipeline keep gives 2 ratio(s)"],
    );
    // Fence: the world one pipeline, so no tensor or data axes; its minimum keep in [0, 1].
    let fence = PlanOptions { fence: true, ..d };
    Plan::new(&fence).expect("fence alone");
    Plan::new(&PlanOptions { fence_compression: false, fence_min_keep: 0.05, ..fence })
        .expect("fence settings");
    expect_error(
        Plan::new(&PlanOptions { tensor_y: 2, ..fence }),
        Status::Unsupported,
        &["cohort_plan_create", "fence makes the whole world one pipeline"],
    );
    expect_error(
        Plan::new(&PlanOptions { fence_min_keep: 2.0, ..fence }),
        Status::InvalidPlan,
        &["plan: fence_min_keep = 2"],
    );
    expect_error(
        Plan::with_pipeline(&PlanOptions { pipeline_stages: 2, ..fence }, &[], &[0.5]),
        Status::InvalidPlan,
        &["fence chooses the stages"],
    );
    expect_error(
        Plan::new(&PlanOptions { automatic: true, ..fence }),
        Status::InvalidPlan,
        &["fence and automatic"],
    );
    let comm = Comm::from_env(&CommOptions::default()).unwrap();
    let optimizer = common::adamw(1e-2);
    // World rank 0 reads a pipeline plan's graph: it cannot go without (other ranks may).
    expect_error(
        Trainer::new_parallel_without_graph(
            &optimizer,
            &Plan::new(&two).unwrap(),
            &comm,
            &TrainerOptions::default(),
        ),
        Status::InvalidHandle,
        &["cohort_trainer_create_parallel", "graph is NULL"],
    );
    // A world of one: nothing to measure, a 1 x 1 zero matrix.
    let links = comm.probe_links().unwrap();
    assert_eq!((links.bytes_per_second, links.latency_seconds), (vec![vec![0.0]], vec![vec![0.0]]));
    assert!(links.report.starts_with("links, Mbit/s (latency ms):"), "{}", links.report);
    assert!(links.report.contains("rank 0"), "{}", links.report);
    // The C call's own argument checks (safe code always passes room for size x size cells).
    let mut cell = [0.0f64; 1];
    // SAFETY: live handle; `cell` holds the one double the call is told of (0 here).
    let status = unsafe {
        sys::cohort_comm_probe_links(
            comm.as_raw(),
            cell.as_mut_ptr(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            0,
            ptr::null_mut(),
        )
    };
    expect_error(
        check(status),
        Status::InvalidArgument,
        &["cohort_comm_probe_links", "cells is 0"],
    );
    // SAFETY: live handle; no output is written (NULL report with a size is refused).
    let status = unsafe {
        sys::cohort_comm_probe_links(
            comm.as_raw(),
            ptr::null_mut(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            8,
            ptr::null_mut(),
        )
    };
    expect_error(check(status), Status::InvalidArgument, &["report is NULL"]);
}

#[test]
fn automatic_plans_are_chosen_before_a_trainer_is_made() {
    let d = PlanOptions::default();
    assert_eq!((d.automatic, d.auto_trials, d.memory_limit_bytes), (false, 0, 0.0));
    expect_error(
        Plan::new(&PlanOptions { automatic: true, auto_trials: 65, ..d }),
        Status::InvalidPlan,
        &["plan: auto_trials = 65 must be in [0, 64]"],
    );
    expect_error(
        Plan::new(&PlanOptions { memory_limit_bytes: -1.0, ..d }),
        Status::InvalidPlan,
        &["plan: memory_limit_bytes = -1"],
    );
    let graph = common::mlp(8, 4);
    let optimizer = common::adamw(1e-2);
    let comm = Comm::from_env(&CommOptions::default()).unwrap();
    let on_cpu = TrainerOptions { seed: 1, ..TrainerOptions::default() };
    // An unresolved automatic plan: the trainer names the call that resolves it.
    let auto = PlanOptions { preset: Preset::Ddp, automatic: true, bucket_bytes: 1 << 20, ..d };
    let unresolved = Plan::new(&auto).unwrap();
    expect_error(
        Trainer::new_parallel(&graph, &optimizer, &unresolved, &comm, &on_cpu),
        Status::InvalidPlan,
        &["cohort_trainer_create_parallel", "cohort_plan_choose"],
    );
    expect_error(
        Plan::choose(&PlanOptions { memory_limit_bytes: 1024.0, ..auto }, &graph, &optimizer, &comm, &on_cpu),
        Status::InvalidPlan,
        &["cohort_plan_choose", "memory_limit_bytes"],
    );
    // A world of one: the layout is one rank's, the rest as given; rank 0's report names it.
    let (chosen, report) = Plan::choose(&auto, &graph, &optimizer, &comm, &on_cpu).unwrap();
    assert!(report.contains("auto plan: chose"), "{}", report);
    assert!(!chosen.automatic);
    assert_eq!((chosen.fence, chosen.fence_compression), (false, true));
    expect_error(
        Plan::choose(&PlanOptions { fence: true, ..auto }, &graph, &optimizer, &comm, &on_cpu),
        Status::InvalidPlan,
        &["cohort_plan_choose", "fence and automatic"],
    );
    assert_eq!((chosen.preset, chosen.bucket_bytes), (Preset::Ddp, 1 << 20));
    assert_eq!((chosen.pipeline_stages, chosen.tensor_x * chosen.tensor_y * chosen.tensor_z), (1, 1));
    let plan = Plan::new(&chosen).unwrap();
    let mut t = Trainer::new_parallel(&graph, &optimizer, &plan, &comm, &on_cpu).unwrap();
    let (x, y) = batch(&mut Lcg(1), 8);
    let inputs = [Tensor::new("x", &x, &[8, FEATURES as i64]), Tensor::new("y", &y, &[8])];
    assert!(t.step(&inputs).unwrap().is_finite());
}
