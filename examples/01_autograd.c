/* examples/01_autograd.c — how ember's autograd works, on a problem you can see.
 *
 * Two interleaved spirals of points in the plane, one per class. A straight
 * line cannot separate them, so we train a small neural network, a multi-layer
 * perceptron (MLP), to tell them apart:
 *
 *     point (2 numbers) -> 32 hidden units -> 32 hidden units -> 2 scores
 *
 * Everything is written by hand from tensors: the weights, the layers, the
 * loss, and the gradient-descent update. There is no nn module and no
 * optimizer here, so that you can see what those will later do for you.
 *
 * Build and run (from the repository root):
 *
 *     meson setup build && meson compile -C build
 *     ./build/examples/01_autograd [graph.dot]
 *     dot -Tsvg autograd_graph.dot > graph.svg     # if Graphviz is installed
 *
 * It prints the loss as it goes down, the final accuracy, and writes the graph
 * that autograd recorded for one training step as Graphviz DOT (to the path
 * given, or autograd_graph.dot in the current directory). It exits with status
 * 1 if training did not work (the loss did not go down, or accuracy < 90%).
 */
#include "ember.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    POINTS_PER_CLASS = 200,
    N = 2 * POINTS_PER_CLASS,   /* the whole data set is one batch */
    HIDDEN = 32,
    STEPS = 1500,
    PRINT_EVERY = 150,
};
static const double LEARNING_RATE = 0.2;
static const double NOISE = 0.05;
static const double PI = 3.14159265358979323846;

/* ---- 1. The data ------------------------------------------------------------
 *
 * Point i of class c sits at angle a = 0.25 + 2*pi*i/200 (plus half a turn for
 * class 1), at radius a / max(a), so each spiral makes one full turn outwards.
 * A little Gaussian noise (from ember's random generator, so the same seed
 * gives the same points) blurs them.
 *
 * x is a [N, 2] float32 tensor, y a [N] int64 tensor of labels 0 or 1. Neither
 * requires grad: they are data, not something we learn.
 */
static void make_spirals(em_tensor **x_out, em_tensor **y_out)
{
    static float xs[N][2];
    static int64_t ys[N];
    em_tensor *noise = em_randn(EM_SHAPE(N, 2), EM_F32, EM_CPU);   /* N(0, 1) */
    double max_angle = 0.25 + 2 * PI * (POINTS_PER_CLASS - 1) / POINTS_PER_CLASS;
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < POINTS_PER_CLASS; i++) {
            int row = c * POINTS_PER_CLASS + i;
            double a = 0.25 + 2 * PI * i / POINTS_PER_CLASS;
            double r = a / max_angle;
            xs[row][0] = (float)(r * cos(a + c * PI) + NOISE * em_get(noise, (int64_t[]){row, 0}));
            xs[row][1] = (float)(r * sin(a + c * PI) + NOISE * em_get(noise, (int64_t[]){row, 1}));
            ys[row] = c;
        }
    }
    em_release(noise);   /* made outside any scope: we own it, so we free it */
    *x_out = em_from_data(xs, EM_SHAPE(N, 2), EM_F32);
    *y_out = em_from_data(ys, EM_SHAPE(N), EM_I64);
}

/* ---- 2. The parameters --------------------------------------------------------
 *
 * A layer computes y = x W^T + b, with W [out, in] and b [out] (PyTorch's
 * nn.Linear layout). These tensors are the *leaves* of every graph we will
 * build: em_requires_grad_ marks them, and from then on
 *   - every op that takes one of them (with grad mode on) is recorded, and
 *   - em_backward will leave d(loss)/d(W) in em_grad(W).
 *
 * They are made outside any scope, so they belong to us until em_release:
 * scopes will free the per-step temporaries but never the weights.
 */
typedef struct layer {
    em_tensor *w, *b;
} layer;

static layer make_layer(int64_t in, int64_t out)
{
    /* N(0, 1/in) weights keep the pre-activations of tanh around unit scale */
    em_tensor *w = em_randn(EM_SHAPE(out, in), EM_F32, EM_CPU);
    em_tensor *scaled = em_mul_scalar(w, 1.0 / sqrt((double)in));
    em_release(w);
    return (layer){
        .w = em_requires_grad_(scaled, true),
        .b = em_requires_grad_(em_zeros(EM_SHAPE(out), EM_F32, EM_CPU), true),
    };
}

/* ---- 3. The model ------------------------------------------------------------
 *
 * Each call below runs the op *and*, because its inputs require grad, records
 * a node: the op's name, which inputs it came from, and the tensors its
 * backward rule will need (matmul keeps both operands; tanh keeps its output,
 * since tanh'(x) = 1 - tanh(x)^2). The result remembers its node: try
 * em_grad_fn_name(h) -> "tanh".
 *
 * Nothing here frees anything: every result belongs to the scope that the
 * caller opened, and dies with it.
 */
static em_tensor *linear(const layer *l, em_tensor *x)
{
    /* [N, in] x [in, out] -> [N, out], then + b broadcast over the N rows.
     * em_transpose is a view (no copy); it is recorded too, so that the
     * gradient of W comes back in W's own [out, in] layout. */
    return em_add(em_matmul(x, em_transpose(l->w, 0, 1)), l->b);
}

static em_tensor *forward(const layer net[3], em_tensor *x)
{
    em_tensor *h = em_tanh(linear(&net[0], x));
    h = em_tanh(linear(&net[1], h));
    return linear(&net[2], h);   /* [N, 2] scores ("logits"), one per class */
}

/* Fraction of points whose higher score is their class. */
static double accuracy(em_tensor *logits, em_tensor *y)
{
    em_tensor *hit = em_to_dtype(em_eq(em_argmax(logits, 1, false), y), EM_F32);
    return em_item(em_mean(hit, 0, NULL, false));
}

int main(int argc, char **argv)
{
    const char *dot_path = argc > 1 ? argv[1] : "autograd_graph.dot";
    em_set_seed(42);   /* seeds everything: data noise and initial weights */

    em_tensor *x, *y;
    make_spirals(&x, &y);
    layer net[3] = {make_layer(2, HIDDEN), make_layer(HIDDEN, HIDDEN), make_layer(HIDDEN, 2)};
    printf("two spirals: %d points, MLP 2 -> %d -> %d -> 2 (tanh), plain SGD, lr %.2f\n", N, HIDDEN, HIDDEN,
           LEARNING_RATE);

    double first_loss = NAN, loss_value = NAN, acc = 0;
    bool dot_ok = true;
    for (int step = 0; step <= STEPS; step++) {
        /* ---- 4. One training step, inside a scope --------------------------------
         * Every tensor created between em_scope_begin and em_scope_end (here,
         * by EM_SCOPE) belongs to the scope and is released at its end: the
         * activations, the loss, the temporaries of backward. So the loop
         * runs in constant memory without a single em_release. */
        EM_SCOPE {
            /* forward: computes the scores and records the graph */
            em_tensor *logits = forward(net, x);
            /* softmax + negative log-likelihood of the right class, averaged
             * over the points (labels equal to -100 would be ignored). */
            em_tensor *loss = em_cross_entropy(logits, y, -100, EM_REDUCE_MEAN);
            loss_value = em_item(loss);
            if (step == 0) {
                first_loss = loss_value;
                /* The graph behind the loss, as it stands now: boxes are ops,
                 * blue ellipses the parameters, grey ones the data. */
                dot_ok = em_graph_dot(loss, dot_path) == EM_OK;
                if (dot_ok) printf("the loss was made by \"%s\"; its graph is in %s\n", em_grad_fn_name(loss), dot_path);
            }
            if (step == STEPS) {
                acc = accuracy(logits, y);
            } else {
                /* backward: walks the recorded nodes from the loss back to
                 * the leaves, newest first. Each node's rule turns the
                 * gradient of its output into gradients of its inputs (chain
                 * rule); at a leaf the gradient is added into em_grad(leaf).
                 * The tensors the nodes saved are freed as soon as each node
                 * has run, so a second em_backward on this loss would be an
                 * error (unless .retain_graph was asked for). */
                em_backward(loss);

                /* ---- 5. Gradient descent by hand -------------------------------
                 * p <- p - lr * dloss/dp. This update must not be recorded:
                 * it is not part of the model. EM_NO_GRAD turns recording
                 * off inside its block. em_copy_ writes into p's own memory,
                 * so the parameter keeps its identity (and requires_grad).
                 * Then em_set_grad(p, NULL) drops the gradient, or the next
                 * backward would add to it (that accumulation is what lets
                 * you sum gradients over several batches on purpose). */
                EM_NO_GRAD {
                    for (int l = 0; l < 3; l++) {
                        em_tensor *params[2] = {net[l].w, net[l].b};
                        for (int k = 0; k < 2; k++) {
                            em_tensor *p = params[k];
                            em_copy_(p, em_sub(p, em_mul_scalar(em_grad(p), LEARNING_RATE)));
                            em_set_grad(p, NULL);
                        }
                    }
                }
            }
        } /* <- the scope ends: this step's tensors (and the graph) are freed */
        /* (never `return` from inside EM_SCOPE: the scope would stay open) */
        if (!dot_ok) {
            fprintf(stderr, "cannot write the graph: %s\n", em_last_error());
            return 1;
        }
        if (step % PRINT_EVERY == 0) printf("step %4d  loss %.4f\n", step, loss_value);
    }
    printf("final loss %.4f (from %.4f), accuracy %.1f%%\n", loss_value, first_loss, 100 * acc);

    for (int l = 0; l < 3; l++) {
        em_release(net[l].w);
        em_release(net[l].b);
    }
    em_release(x);
    em_release(y);

    if (!(loss_value < first_loss) || acc < 0.9) {
        fprintf(stderr, "training failed: loss %.4f -> %.4f, accuracy %.3f (want a lower loss and >= 0.9)\n",
                first_loss, loss_value, acc);
        return 1;
    }
    return 0;
}
