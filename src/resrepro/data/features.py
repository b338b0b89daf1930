"""Image features for the captioner: one vector per region, its position appended.

The captioner's encoder has no position encoding of its own: where a region lies is part of its
feature vector, the centre (row, column) of the region as fractions of the image's height and
width, appended to every kind of feature. Grid cells and detected boxes are then read alike, and
"on the left" can be learned from either.

- `patch_grid` (mini): the image averaged over `pool` x `pool` pixel blocks (the scenes' pixel
  noise halved at 2), then cut into grid x grid patches, each patch's pixels in [0, 1] (a linear
  patch embedding is then the captioner's first layer, as in ViT). On the scenes, raw 8x8 patches
  (194 values) left a mini captioner writing one caption for every image after 600 updates (CIDEr
  43); pooled 4x4 patches (50 values) reach CIDEr 106 in the same updates (docs/captioning.md).
"""

from __future__ import annotations

import numpy as np


def grid_centres(grid: int) -> np.ndarray:
    """(grid * grid, 2): the centre (row, column) of each cell of a grid, row-major, as fractions."""
    centre = (np.arange(grid) + 0.5) / grid
    rows, cols = np.meshgrid(centre, centre, indexing="ij")
    return np.stack([rows.ravel(), cols.ravel()], axis=1)


def patch_grid(images: np.ndarray, grid: int, pool: int = 1) -> np.ndarray:
    """(N, H, W, C) uint8 images -> (N, grid * grid, (H/pool/grid) * (W/pool/grid) * C + 2) float32:
    the image averaged over pool x pool blocks, each patch's pixels / 255, row-major patches, then
    the patch's centre (row, column)."""
    n, h, w, c = images.shape
    if h % pool or w % pool:
        raise ValueError(f"a {h}x{w} image does not pool by {pool}")
    images = images.reshape(n, h // pool, pool, w // pool, pool, c).mean(axis=(2, 4))
    n, h, w, c = images.shape
    if h % grid or w % grid:
        raise ValueError(f"a {h}x{w} image does not cut into a {grid}x{grid} grid")
    ph, pw = h // grid, w // grid
    patches = images.reshape(n, grid, ph, grid, pw, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, grid * grid, ph * pw * c)
    centres = np.broadcast_to(grid_centres(grid), (n, grid * grid, 2))
    return np.concatenate([patches / 255.0, centres], axis=2).astype(np.float32)
