# qwen35 (Gated DeltaNet hybrid) tests.
# test_gdn_ops drives the CPU backend's GDN ops directly (engine/backend/backend_cpu_gdn.c compiled in),
# so it does not depend on the rest of the backend; it also checks the chunked form
# (engine/backend/gdn_chunked.c) against the sequential scan.
gt_add_test(test_gdn_ops
  SOURCES tests/unit/test_gdn_ops.c engine/backend/backend_cpu_gdn.c engine/backend/gdn_chunked.c
  LIBS gantry_common OpenMP::OpenMP_C
  TIMEOUT 120)

# qwen35-tiny (bf16) against the golden logits and generations; chunked / batched / snapshot;
# loader variants written with the GGUF writer (gantry_quant).
gt_add_test(test_qwen35
  SOURCES tests/unit/test_qwen35.c
  LIBS gantry_model gantry_quant gantry_testutil
  TIMEOUT 300)
# the MTP drafter: its forward against a plain reference, speculative identity (tests/unit/test_qwen35_mtp.c)
gt_add_test(test_qwen35_mtp SOURCES tests/unit/test_qwen35_mtp.c LIBS gantry_sched gantry_model_fx gantry_quant TIMEOUT 600)

# the trained hybrid demo model with its MTP block (tests/golden/demo35/) against its reference; only
# where its golden files are in the tree (tools/demo35/unpack_demo35.py puts them there: the model is
# ~15 MB, which the 64 MiB a device call carries cannot also hold)
if(EXISTS ${CMAKE_SOURCE_DIR}/tests/golden/demo35/manifest.json)
  gt_add_test(test_demo35 SOURCES tests/unit/test_demo35.c LIBS gantry_golden TIMEOUT 600)
endif()
