// The convolution and GEMM algorithms and the attention kernels chosen at init, remembered within
// one init (the same shape is timed once) and across runs in the autotune cache: one file per (GPU,
// cuDNN version, workspace size) under --autotune-cache DIR, holding every shape ever timed there,
// whatever the model. A warm cache skips cuDNN's Find and the retiming (most of a start's second)
// and makes the choice the same from run to run.
#ifndef SI_CUDA_AUTOTUNE_CUH
#define SI_CUDA_AUTOTUNE_CUH

#include <cudnn.h>

#include "cuda/backend_internal.cuh"

typedef struct {
    si_conv_shape s;
    int t, cpad; // the activation type and the padded channels: what the descriptors are made of
    int epi;     // the node's bias, residual and activation (conv_epi): the narrow kernel's
                 // choice was timed with them
    cudnnConvolutionFwdAlgo_t algo;
    cudnnMathType_t math;
    size_t ws;
    float ms;
    int nconv; // our narrow-channel kernel beat cuDNN on the whole node (narrowconv.cu)
} memo_entry;

// A timed matmul: what cuda/gemm.cu's lt_setup makes its descriptors of, and the place of the
// fastest algorithm in cuBLASLt's heuristic answer for them (the same cuBLASLt on the same GPU
// answers in the same order), or CUTLASS's variant that beat them
typedef struct {
    int64_t dims[8]; // A's rows and columns, B's, D's, A's and B's batch strides
    int32_t opa, opb, batch, epi, t, beta;
    int32_t l90;  // whether CUTLASS's Linear kernel was a candidate
    int32_t rank; // >= 0: cuBLASLt's candidate; < 0: CUTLASS's variant -1 - rank
    float ms;
} gemm_memo_entry;

// An attention node's choice between cuDNN's fused SDPA and our kernel (sdpa.cu): what
// sdpa.cu's same_shape compares (the sizes, batch dims and every operand's strides), the
// activations' type, and which one ran it faster (cuDNN's only where it also agreed with ours).
// The two give different bits, so a warm cache also keeps a run's results the same as the last.
#define ATTN_KEY 56
typedef struct {
    int64_t key[ATTN_KEY];
    int32_t t, cudnn;
    float ms;
} attn_memo_entry;

#define MEMO_CAP      4096
#define GEMM_MEMO_CAP 1024
#define ATTN_MEMO_CAP 256
struct algo_memo {
    memo_entry e[MEMO_CAP];
    int n, loaded;   // loaded: the first `loaded` came from the cache file
    int asked, hits; // convs of this init that cuDNN runs, and those the cache file answered
    gemm_memo_entry ge[GEMM_MEMO_CAP];
    int gn, gloaded; // the same for the timed matmuls
    bool dirty;      // a loaded entry (a matmul's or an attention node's) was replaced
    int gasked, ghits;
    attn_memo_entry ae[ATTN_MEMO_CAP];
    int an, aloaded; // the same for the attention nodes' choices
    int aasked, ahits;
    int device;
    size_t workspace;
    char path[1024]; // the cache file; "" when there is none
};

// The cache file of this device, cuDNN and workspace under dir (NULL: $XDG_CACHE_HOME or
// ~/.cache, then shardinfer/autotune; "off": none) into m->path, and its entries into m. A file
// that is missing, damaged or made by another build is ignored (and rewritten by save).
void si_cuda_autotune_load(algo_memo *m, const char *dir, int device, size_t workspace);
// When this init timed shapes the file lacked: the whole memo written to the file atomically
// (a private temporary, then rename), so ranks starting together never see a torn file. A
// failure to write is a warning: the run goes on.
void si_cuda_autotune_save(const algo_memo *m);

// A blob beside the cache file (the same GPU, cuDNN and workspace): "<file>.<tag>", a header,
// the bytes and their CRC-32, written atomically as the file is. Used for cuDNN's serialized
// execution plans, whose runtime-compiled kernels are most of a warm start's time where the
// cache chose them. load: the bytes (malloc'd, *n their count), or NULL when there is no cache,
// no blob, or a damaged one (then nothing is said: the caller builds and saves it again).
void *si_cuda_autotune_blob_load(const algo_memo *m, const char *tag, size_t *n);
bool si_cuda_autotune_blob_save(const algo_memo *m, const char *tag, const void *data, size_t n);

#endif
