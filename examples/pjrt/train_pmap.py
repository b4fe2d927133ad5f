"""Data-parallel training with jax.pmap and pmean over every device, in the style of a JAX
tutorial, run unchanged on a simulated slice with

    JAX_PLATFORMS=tpusim TPUSIM_TOPOLOGY=2x2 python3 examples/pjrt/train_pmap.py [OUT.npz]

or on 4 CPU devices (JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=4).
Two changes from the tutorial, both needed by JAX 0.10 on any platform: jax.device_put_replicated
is gone, so `replicate` stacks the values itself, and the learning rate is passed one per
device (a 0-d array cannot be mapped over axis 0)."""
import sys
from functools import partial
import jax
import jax.numpy as jnp
from jax import pmap
import numpy as np

def linear_layer(params, x):
    return x @ params["W"] + params["b"]

def model_forward(params, x):
    x = linear_layer(params["layer1"], x)
    x = jax.nn.relu(x)
    return linear_layer(params["layer2"], x)

def cross_entropy_loss(params, x, labels):
    logits = model_forward(params, x)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1))

np.random.seed(0)
params = {
    "layer1": {"W": jnp.array(np.random.randn(64, 32) * 0.1, dtype=jnp.float32), "b": jnp.zeros(32)},
    "layer2": {"W": jnp.array(np.random.randn(32, 10) * 0.1, dtype=jnp.float32), "b": jnp.zeros(10)},
}
x = jnp.array(np.random.randn(64, 64), dtype=jnp.float32)
labels = jnp.array(np.eye(10)[np.random.randint(0, 10, 64)], dtype=jnp.float32)

n_devices = jax.device_count()
print(f"Available devices: {n_devices}")

def replicate(x):
    """Replicate a value on all devices (jax.device_put_replicated is gone in JAX 0.10)."""
    return jax.tree_util.tree_map(lambda a: jnp.stack([a] * n_devices), x)

replicated_params = replicate(params)

@partial(pmap, axis_name="batch")
def distributed_train_step(params, x, labels, learning_rate):
    loss, grads = jax.value_and_grad(cross_entropy_loss)(params, x, labels)
    grads = jax.lax.pmean(grads, axis_name="batch")
    loss = jax.lax.pmean(loss, axis_name="batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - learning_rate * g, params, grads)
    return new_params, loss

def shard_batch(x, n_devices):
    assert x.shape[0] % n_devices == 0
    return x.reshape(n_devices, x.shape[0] // n_devices, *x.shape[1:])

x_sharded = shard_batch(x, n_devices)
labels_sharded = shard_batch(labels, n_devices)
for step in range(2):
    replicated_params, losses = distributed_train_step(
        replicated_params, x_sharded, labels_sharded, jnp.array([1e-1] * n_devices))
    print(f"Mean loss: {losses[0]:.6f}")
p = jax.tree_util.tree_map(lambda a: np.asarray(a), replicated_params)
if len(sys.argv) > 1:
    np.savez(sys.argv[1], loss=np.asarray(losses),
             W1=p["layer1"]["W"], b1=p["layer1"]["b"], W2=p["layer2"]["W"], b2=p["layer2"]["b"])
