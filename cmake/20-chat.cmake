# engine/chat/: native Qwen chat-template rendering, streaming output parser, stop strings.
add_library(gantry_chat STATIC engine/chat/chat.c engine/chat/chat_detect.c engine/chat/chat_json.c engine/chat/chat_msgs.c
            engine/chat/chat_parse.c engine/chat/stop.c)
target_link_libraries(gantry_chat PUBLIC gantry_common PkgConfig::JANSSON)
gt_add_test(test_chat_parse SOURCES tests/unit/test_chat_parse.c LIBS gantry_chat TIMEOUT 120)
gt_add_test(test_stop SOURCES tests/unit/test_stop.c LIBS gantry_chat TIMEOUT 60)
gt_add_test(test_chat SOURCES tests/unit/test_chat.c LIBS gantry_chat gantry_testutil TIMEOUT 120)
