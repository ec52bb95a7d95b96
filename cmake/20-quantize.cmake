# tools/: row quantizers, llama.cpp type mixes, file quantizer (gantry-quantize), synthetic
# production-shape models (gantry-mkmodel).
add_library(gantry_quant STATIC tools/quantize.c tools/mkmodel.c tools/mkmodel_vocab.c)
target_link_libraries(gantry_quant PUBLIC gantry_gguf gantry_common Threads::Threads m)

add_executable(gantry-quantize tools/quantize_main.c)
target_link_libraries(gantry-quantize PRIVATE gantry_quant)
target_compile_definitions(gantry-quantize PRIVATE GANTRY_VERSION="${PROJECT_VERSION}")

add_executable(gantry-mkmodel tools/mkmodel_main.c)
target_link_libraries(gantry-mkmodel PRIVATE gantry_quant)
target_compile_definitions(gantry-mkmodel PRIVATE GANTRY_VERSION="${PROJECT_VERSION}")

gt_add_test(test_quantize SOURCES tests/unit/test_quantize.c LIBS gantry_quant gantry_testutil TIMEOUT 300)
add_dependencies(test_quantize gantry-quantize)
gt_add_test(test_gguf_write SOURCES tests/unit/test_gguf_write.c LIBS gantry_quant gantry_testutil TIMEOUT 120)
gt_add_test(test_mkmodel SOURCES tests/unit/test_mkmodel.c LIBS gantry_quant gantry_testutil TIMEOUT 300)
add_dependencies(test_mkmodel gantry-mkmodel)

# gantry-gguf-set: a copy of a GGUF with metadata keys set (e.g. {arch}.pooling_type for --task embed)
add_executable(gantry-gguf-set tools/gguf_set_main.c)
target_link_libraries(gantry-gguf-set PRIVATE gantry_gguf gantry_common)
