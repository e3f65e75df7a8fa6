# Data parallelism (core/parallel): the single-process unit tests, and dp_rank under cohort-run
# at 2 and 4 ranks over shared memory and TCP, each checked against an in-process reference
# ("-f2" / "-f4": streaming outer synchronisation over 2 / 4 fragments; "-k25" / "-k3": DDP with
# top-k gradient compression keeping 25% / 3%).
file(GLOB DP_UNIT_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/unit/core/parallel/*_test.cpp)
cohort_test(parallel_test LABEL unit TIMEOUT 120 SOURCES ${DP_UNIT_TESTS} LIBS cohort_core)

add_executable(dp_rank dp_rank.cpp)
target_compile_options(dp_rank PRIVATE ${COHORT_WARNINGS})
target_include_directories(dp_rank PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
target_link_libraries(dp_rank PRIVATE cohort_core)
function(dp_test mode n tls)
  cohort_rank_test(multirank.dp.${mode}.n${n}.${tls} RANKS ${n} TLS ${tls} COMMAND $<TARGET_FILE:dp_rank> ${mode})
endfunction()
foreach(mode ddp localsgd slowmo diloco co2 co2-plain co2-heavy co2-late co2-penalty co2-clip co2-8bit co2-4bit
             co2-resume co2-8bit-resume localsgd-zero1 diloco-zero1
             diloco-clip diloco-clip-zero1 diloco-zero1-resume outer-memory co2-auto ddp-wide ddp-zero1-wide co2-wide
             co2-wide-resume diloco-f2 diloco-f4 co2-f2 co2-f4 co2-clip-f4 co2-penalty-f2 co2-late-f4 co2-f2-resume
             co2-f4-resume diloco-f4-resume co2-8bit-f2 co2-4bit-f4 co2-8bit-f2-resume ddp-k25 ddp-k3 ddp-k25-resume ddp-zero1-k25
             ddp-zero1-k3-resume diloco-zero1-f2 diloco-clip-zero1-f4 diloco-zero1-f4-resume co2-auto-resume
             co2-auto-f2 co2-auto-f4 co2-auto-f2-resume co2-auto-f4-resume localsgd-avgstate diloco-avgstate-f2
             diloco-zero1-avgstate diloco-avgstate-resume co2-noise-adamw diloco-noise-adamw co2-adamw)
  foreach(n 2 4)
    foreach(tls shm tcp)
      dp_test(${mode} ${n} ${tls})
    endforeach()
  endforeach()
endforeach()
# NaN and Inf in the last rank's batch (or its parameters): DDP ranks skip together and stay
# identical, local SGD / co2 ranks skip alone; each against its reference (issue #25).
foreach(mode ddp-nan ddp-zero1-nan ddp-zero3-nan localsgd-nan localsgd-zero1-nan co2-nan
             localsgd-nanparam localsgd-zero1-nanparam co2-nanparam co2-nanmerge localsgd-nan-f2 co2-nanparam-f2
             localsgd-zero1-nanparam-f2 localsgd-avgstate-nan
             co2-nanmerge-f4 ddp-k25-nan ddp-zero1-k25-nan)
  foreach(n 2 4)
    dp_test(${mode} ${n} shm)
  endforeach()
endforeach()
# The last rank dies mid-round: every survivor must fail naming it (no hang); -wide while the
# survivors read its registered memory in place.
foreach(tls shm tcp)
  foreach(mode co2-kill diloco-zero1-kill co2-wide-kill ddp-wide-kill co2-f4-kill diloco-f2-kill ddp-k3-kill)
    dp_test(${mode} 3 ${tls})
  endforeach()
endforeach()
# Shard groups (plan.shard_group 2): 2 replicas of 2 ranks at world 4 (and one replica of 2 at
# world 2), ZeRO 1-3 inside each replica, localsgd / DiLoCo / co2 between them on each rank's
# shard, against the reference with one simulated rank per replica; resumed bit for bit; NaN in
# the last rank's batch (its replica skips) or parameters (its replica drops the round); the last
# rank killed mid-round; and the memory per rank against unsharded runs (shard-memory). "-f<F>":
# the outer synchronisation streamed over F fragments, each on its pieces of every rank's shard;
# co2's "-8bit" / "-4bit": each rank's low-bit message of its shard (blocks of the shard's order,
# not the reference's whole-model order: within the low-bit tolerance, positions' anchors alike).
# "-noise" with "-adamw": inner noise scaling over the replicas.
foreach(mode localsgd-zero3-g2 diloco-zero1-g2 diloco-zero2-g2 diloco-zero3-g2 diloco-clip-zero2-g2 co2-zero1-g2
             co2-zero2-g2 co2-zero3-g2 co2-clip-zero3-g2 co2-penalty-zero2-g2 co2-late-zero3-g2 co2-auto-zero2-g2
             diloco-zero2-g2-resume diloco-zero3-g2-resume co2-zero2-g2-resume co2-zero3-g2-resume shard-memory
             diloco-zero2-g2-f2 localsgd-zero1-g2-f4 co2-zero3-g2-f2 co2-clip-zero1-g2-f4 co2-penalty-zero2-g2-f2
             co2-auto-zero2-g2-f2 co2-zero2-g2-f2-resume diloco-zero3-g2-f4-resume co2-auto-zero3-g2-f2-resume
             co2-8bit-zero2-g2 co2-4bit-zero3-g2 co2-4bit-zero1-g2-f2 co2-8bit-zero3-g2-resume
             co2-4bit-zero2-g2-f2-resume co2-noise-zero2-g2-adamw diloco-noise-zero3-g2-adamw
             co2-noise-zero3-g2-adamw-resume)
  foreach(n 2 4)
    # One replica's guess is its average: no gap for the penalty to scale.
    if(n EQUAL 2 AND mode MATCHES "penalty")
      continue()
    endif()
    foreach(tls shm tcp)
      dp_test(${mode} ${n} ${tls})
    endforeach()
  endforeach()
endforeach()
foreach(mode diloco-zero2-g2-nan co2-zero3-g2-nan diloco-zero2-g2-nanparam co2-zero2-g2-nanparam)
  dp_test(${mode} 4 shm)
endforeach()
foreach(tls shm tcp)
  foreach(mode co2-zero3-g2-kill diloco-zero2-g2-kill)
    dp_test(${mode} 4 ${tls})
  endforeach()
endforeach()
# The trainers on the CUDA device, 2 ranks (label gpu; exit 77, skipped, without a device): DDP
# over NCCL where each rank has a device of its own, else (one GPU) through host copies over UCX;
# co2 through host copies always (co2-f2: its outer synchronisation over 2 fragments).
if(COHORT_HAVE_CUDA)
  foreach(mode ddp co2 co2-f2)
    cohort_rank_test(multirank.dp.${mode}-cuda.n2 RANKS 2 TLS shm LABEL gpu
                     COMMAND $<TARGET_FILE:dp_rank> ${mode}-cuda PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endif()
# ZeRO stages 1-3 of DDP (zero.cmake), included the same guarded way.
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/zero.cmake)
  include(${CMAKE_CURRENT_LIST_DIR}/zero.cmake)
endif()
