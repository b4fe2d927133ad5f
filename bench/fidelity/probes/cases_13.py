# scans (session 13): short scans (at most 128) along one axis of a rank-3 array, the shapes
# drawn off the families corpus's: the compiler's depthwise window kernel between two relayout
# copies (docs/compiler.md, scan gaps (3)), its output blocks along the scan and where it reads.
import jax, jax.numpy as jnp
from jax import lax
F32, S32, BF = jnp.float32, jnp.int32, jnp.bfloat16
CASES = [
 ("p_scan_min_s32_96x150x40_ax2", lambda a: lax.cummin(a, axis=2), [((96, 150, 40), S32)]),
 ("p_scan_sum_f32_100x72x100_ax1", lambda a: jnp.cumsum(a, axis=1), [((100, 72, 100), F32)]),
 ("p_scan_max_s32_50x200x96_ax0", lambda a: lax.cummax(a, axis=0), [((50, 200, 96), S32)]),
 ("p_scan_sum_f32_64x64x24_ax2", lambda a: jnp.cumsum(a, axis=2), [((64, 64, 24), F32)]),
 ("p_scan_min_f32_200x100x60_ax2", lambda a: lax.cummin(a, axis=2), [((200, 100, 60), F32)]),
 ("p_scan_sum_s32_40x300x100_ax1", lambda a: jnp.cumsum(a, axis=1), [((40, 300, 100), S32)]),
 ("p_scan_max_f32_120x16x120_ax2", lambda a: lax.cummax(a, axis=2), [((120, 16, 120), F32)]),
 ("p_scan_sum_f32_30x257x50_ax0", lambda a: jnp.cumsum(a, axis=0), [((30, 257, 50), F32)]),
]
