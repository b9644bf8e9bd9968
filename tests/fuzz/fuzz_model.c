/* libFuzzer target for the model reader: any byte string goes through the protobuf parser, the
 * graph builder (conversion, constant folding, fusion) and shape inference for two batch sizes
 * and the memory planner. It must never crash, hang or allocate beyond the input's size
 * (the host-tensor and element-count caps); errors are expected and ignored.
 * Build and run: scripts/fuzz.sh model [SECONDS] (docs/user-guide.md, "Fuzzing"). */
#include <stddef.h>
#include <stdint.h>

#include "engine/graph.h"
#include "engine/memplan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    si_model_proto *m = NULL;
    if (si_model_proto_parse(data, size, "fuzz.onnx", &m) != SI_OK) return 0;
    si_graph *g = NULL;
    if (si_graph_build(m, NULL, &g) == SI_OK) {
        for (int batch = 1; batch <= 3; batch += 2) {
            if (si_graph_infer(g, batch) != SI_OK) break;
            si_memplan p;
            si_memplan_build(g, 64, &p);
            si_memplan_free(&p);
        }
        si_graph_free(g);
    }
    si_model_proto_free(m);
    return 0;
}
