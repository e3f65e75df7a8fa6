# Tensor parallelism (core/parallel/tensor_parallel.cpp): tp_rank under cohort-run, each rank
# checked against a single process on the same global batch within the fp32 bound that
# tests/unit/core/parallel/tp_reference.h derives (and prints): Megatron 1D over the whole world
# at 2 and 4 ranks for the GPT and the MLP over shared memory and TCP, overlap off for
# comparison, data 2 x tensor 2 at 4 ranks, AxoNN's grids (2 x 2 over X and Y, Z = 2 with Y = 2,
# data 2 x X 2), a rank killed mid-run failing every survivor, the gpt with activation
# checkpointing (also on the 2D grid), sequence parallelism (also on the 2D grid) and pipeline
# stages (below), and ZeRO 3 over the data axis of a tensor grid (below).
add_executable(tp_rank tp_rank.cpp)
target_compile_options(tp_rank PRIVATE ${COHORT_WARNINGS})
target_include_directories(tp_rank PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
target_link_libraries(tp_rank PRIVATE cohort_core)
function(tp_test mode n tls)
  cohort_rank_test(multirank.tp.${mode}.n${n}.${tls} RANKS ${n} TLS ${tls} COMMAND $<TARGET_FILE:tp_rank> ${mode})
endfunction()
foreach(model gpt mlp)
  foreach(n 2 4)
    foreach(tls shm tcp)
      tp_test(${model} ${n} ${tls})
    endforeach()
  endforeach()
  tp_test(${model}-y2 4 shm)
  tp_test(${model}-y2 4 tcp)
  tp_test(${model}-nooverlap 2 shm)
  tp_test(${model}-x2-y2 4 shm)
  tp_test(${model}-x2-y2 4 tcp)
  tp_test(${model}-y2-z2 4 tcp)
  tp_test(${model}-x2-y1 4 shm)
  tp_test(${model}-kill 4 tcp)
endforeach()
# Activation checkpointing under tensor parallelism (the gpt: the mlp has no blocks).
tp_test(gpt-ckpt 2 shm)
tp_test(gpt-ckpt 4 tcp)
tp_test(gpt-x2-y2-ckpt 4 shm)
# Megatron's sequence parallelism (the gpt: the mlp has no tokens), with checkpointing too, and
# on the 2D grid X 2 x Y 2.
tp_test(gpt-seq 2 tcp)
tp_test(gpt-y2-z2-seq 4 shm)
tp_test(gpt-x2-y2-seq 4 shm)
tp_test(gpt-x2-y2-seq 4 tcp)
tp_test(gpt-seq-ckpt 4 shm)
tp_test(gpt-a2a 4 tcp)
# ZeRO 3 over the data axis (data 2 x tensor_y 2, data 2 x tensor_z 2: the Z all-gathers read the
# gathered weights while in flight): each rank against one process, its parameter memory bounded,
# and a resume from per-rank checkpoints bit for bit (tp_rank's -zero3).
tp_test(gpt-y2-zero3 4 shm)
tp_test(gpt-y2-zero3 4 tcp)
tp_test(mlp-y2-zero3 4 shm)
tp_test(gpt-y1-z2-zero3 4 tcp)
# ZeRO 3 over the data axis of pipeline stages (data 2 x pipe 2, 1F1B over 4 micro-batches): each
# bucket gathered per schedule slot that reads it (zero.cpp), checked as above.
tp_test(gpt-p2-y1-zero3 4 shm)
tp_test(mlp-p2-y1-zero3 4 tcp)
# Pipeline stages (core/parallel/pipeline.h) as processes: 2 stages over tcp, 2 stages x tensor 2,
# 2 stages x tensor_z 2, 4 stages with the last one killed mid-run (every survivor fails naming it,
# within the deadline).
tp_test(gpt-p2-y1 2 tcp)
tp_test(mlp-p2-y1 4 shm)
tp_test(gpt-p2-y2 4 shm)
tp_test(gpt-p2-y1-z2 4 shm)
tp_test(gpt-p2-y1-z2 4 tcp)
tp_test(mlp-p2-y1-z2 4 tcp)
tp_test(gpt-p4-y1-kill 4 tcp)
tp_test(gpt-y2-a2a 4 shm)
# OP-Fence (core/parallel/fence.h): the links probed, the world one pipeline, ranks 1.. given no
# model (every pipeline test above runs them so too).
tp_test(gpt-fence 4 tcp)
tp_test(mlp-fence 2 shm)

# A rank that only receives its model (#29): world rank 0 runs tp_rank, which cuts the model and
# sends the stages; every other rank runs stage_receiver, a C program with no model of its own
# (graph NULL), fed the same batches. Rank 0's parameters are checked against one process. The
# world is one pipeline in each (stage_receiver's plan: its stages = the world).
add_executable(stage_receiver stage_receiver.c)
target_link_libraries(stage_receiver PRIVATE cohort m)
target_include_directories(stage_receiver PRIVATE ${PROJECT_SOURCE_DIR})
set_target_properties(stage_receiver PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(stage_receiver PRIVATE -Wall -Wextra -Werror)
# (No semicolon in the shell line: cohort_rank_test passes COMMAND on as a CMake list.)
function(receiver_test mode model n tls extra)
  cohort_rank_test(multirank.tp.${mode}.receiver.n${n}.${tls} RANKS ${n} TLS ${tls}
                   COMMAND sh -c
                           "[ \"$COHORT_RANK\" = 0 ] && exec \"$0\" ${mode} || exec \"$1\" ${model} ${extra}"
                           $<TARGET_FILE:tp_rank> $<TARGET_FILE:stage_receiver>
                   PROPERTIES FAIL_REGULAR_EXPRESSION "MISMATCH|failed")
endfunction()
receiver_test(gpt-p2-y1 gpt 2 shm "")
receiver_test(mlp-p2-y1 mlp 2 tcp "")
receiver_test(gpt-fence gpt 4 tcp fence)
