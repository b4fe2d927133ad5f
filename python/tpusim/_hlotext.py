"""Fix-ups of the HLO text JAX lowers, before tpusim loads it (tpusim.simulate, tpusim.jit
and the PJRT plugin's converter share them)."""
import re

# One entry of a module's `xla.sdy.meshes={a = #sdy.mesh<[...]>, b = ...}`; a mesh without
# axes (`#sdy.mesh<[]>`, JAX's `empty_mesh` for arguments it did not shard, such as a Python
# scalar, and maximal meshes with their device_ids) names no devices.
_MESH = re.compile(r'\s*([\w$.-]+|"[^"]*")\s*=\s*#sdy\.mesh<(\[[^\]]*\])(?:,\s*device_ids=\[[^\]]*\])?>\s*')


def drop_empty_meshes(text):
    """The text with the Shardy meshes that have no axes left out of the module header's
    xla.sdy.meshes, so that the mesh tpusim partitions over is the one with the devices (a jit
    over sharded arrays and a Python scalar names both). Unchanged when there is nothing to
    drop or the header has another form."""
    head_end = text.find("\n")
    head = text if head_end < 0 else text[:head_end]
    k = head.find("xla.sdy.meshes={")
    if k < 0:
        return text
    start = k + len("xla.sdy.meshes={")
    depth, j = 1, start
    while j < len(head) and depth:
        depth += {"{": 1, "}": -1}.get(head[j], 0)
        j += 1
    if depth:
        return text
    body = head[start:j - 1]
    entries, pos = [], 0
    while pos < len(body):
        m = _MESH.match(body, pos)
        if not m:
            return text
        entries.append((m.group(0).strip(), m.group(2).strip() != "[]"))
        pos = m.end()
        if pos < len(body):
            if body[pos] != ",":
                return text
            pos += 1
    kept = [e for e, axes in entries if axes]
    if not kept or len(kept) == len(entries):
        return text
    return text[:start] + ", ".join(kept) + text[j - 1:]
