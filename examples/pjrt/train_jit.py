"""A jitted training step in the style of a JAX tutorial (value_and_grad, tree_map), run
unchanged on tpusim's simulated TPU with

    JAX_PLATFORMS=tpusim python3 examples/pjrt/train_jit.py [OUT.npz]

or on JAX's CPU with JAX_PLATFORMS=cpu (docs/pjrt.md). Saves the final parameters and loss
to OUT.npz when given (python/tests/test_pjrt.py compares the two)."""
import sys
import jax
import jax.numpy as jnp
from jax import jit
import numpy as np

def linear_layer(params, x):
    return x @ params["W"] + params["b"]

def model_forward(params, x):
    x = linear_layer(params["layer1"], x)
    x = jax.nn.relu(x)
    x = linear_layer(params["layer2"], x)
    return x

def cross_entropy_loss(params, x, labels):
    logits = model_forward(params, x)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1))

@jit
def train_step(params, x, labels, learning_rate):
    loss, grads = jax.value_and_grad(cross_entropy_loss)(params, x, labels)
    new_params = jax.tree_util.tree_map(lambda p, g: p - learning_rate * g, params, grads)
    return new_params, loss

np.random.seed(0)
params = {
    "layer1": {"W": jnp.array(np.random.randn(784, 256) * 0.01, dtype=jnp.float32), "b": jnp.zeros(256)},
    "layer2": {"W": jnp.array(np.random.randn(256, 10) * 0.01, dtype=jnp.float32), "b": jnp.zeros(10)},
}
x = jnp.array(np.random.randn(128, 784), dtype=jnp.float32)
labels = jnp.array(np.eye(10)[np.random.randint(0, 10, 128)], dtype=jnp.float32)
for step in range(3):
    params, loss = train_step(params, x, labels, 1e-1)
    print(f"Step {step}: loss = {loss:.6f}")
if len(sys.argv) > 1:
    np.savez(sys.argv[1], loss=np.asarray(loss), **{k: np.asarray(v) for k, v in
             [("W1", params["layer1"]["W"]), ("b1", params["layer1"]["b"]),
              ("W2", params["layer2"]["W"]), ("b2", params["layer2"]["b"])]})
print(jax.devices())
