# ZeRO stages 0-3 of DDP (core/parallel/zero.cpp): zero_rank under cohort-run at 2 and 4 ranks
# over shared memory and TCP, each checked against a single process on the concatenated batch
# (SGD with momentum and AdamW, clipping by global norm, weight decay), and the per-rank
# model-state memory shrinking with the stage at 4 ranks, and a resume from per-rank checkpoints
# of the optimizer shards matching the uninterrupted run bit for bit, and the trainer's statistics
# counting the time spent waiting for a late rank as waiting, not compute.
add_executable(zero_rank zero_rank.cpp)
target_compile_options(zero_rank PRIVATE ${COHORT_WARNINGS})
target_include_directories(zero_rank PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
target_link_libraries(zero_rank PRIVATE cohort_core)
function(zero_test name n tls)
  cohort_rank_test(multirank.zero.${name}.n${n}.${tls} RANKS ${n} TLS ${tls} COMMAND $<TARGET_FILE:zero_rank> ${ARGN})
endfunction()
foreach(stage 1 2 3)
  foreach(kind sgd adamw)
    foreach(n 2 4)
      foreach(tls shm tcp)
        zero_test(stage${stage}-${kind} ${n} ${tls} ${stage} ${kind})
      endforeach()
    endforeach()
  endforeach()
endforeach()
foreach(tls shm tcp)
  zero_test(memory 4 ${tls} memory)
  foreach(stage 1 2 3)
    zero_test(resume${stage} 4 ${tls} resume ${stage})
  endforeach()
  foreach(stage 0 3)
    zero_test(waits${stage} 2 ${tls} waits ${stage})
  endforeach()
endforeach()
