/* common/engine_rpc.h — the gRPC method names of the gantry.v1.Engine service
 * (protos/gantry/v1/engine.proto), for its server (engine/server/) and its clients
 * (common/engine_client.h, the router, tests). */
#ifndef GANTRY_COMMON_ENGINE_RPC_H
#define GANTRY_COMMON_ENGINE_RPC_H

#define EC_METHOD_GENERATE "/gantry.v1.Engine/Generate"
#define EC_METHOD_TOKENIZE "/gantry.v1.Engine/Tokenize"
#define EC_METHOD_DETOKENIZE "/gantry.v1.Engine/Detokenize"
#define EC_METHOD_INFO "/gantry.v1.Engine/Info"
#define EC_METHOD_HEALTH "/gantry.v1.Engine/Health"
#define EC_METHOD_EMBED "/gantry.v1.Engine/Embed"

#endif
