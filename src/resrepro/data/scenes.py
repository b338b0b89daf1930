"""Seeded synthetic scenes with five reference captions each: the mini scale's stand-in for MSCOCO.

Each 32x32 RGB image holds one or two shapes (circle, square, triangle) of a colour (red, green,
blue, yellow, white), a size (small, large) and a place (left, right, top, bottom, middle for one
shape; side by side, left and right, for two), on a dark background with pixel noise. Its five
captions are written from the scene by five different templates, drawn per image from a larger
pool, with synonyms ("square" / "box", "circle" / "ball"), so the references disagree in wording
as COCO's do and agree on content: a caption that scores well must name what is in the image.

Everything comes from one seed (numpy's PCG64), so a prepared dataset is the same on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SIZE = 32  # pixels per side
SHAPES = ("circle", "square", "triangle")
COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (50, 80, 230), "yellow": (230, 210, 40), "white": (235, 235, 235)}
SIZES = {"small": 4.0, "large": 7.0}  # half-width in pixels
# centre of each place for a lone shape; two shapes sit left and right
PLACES = {"left": (16.0, 8.5), "right": (16.0, 23.5), "top": (8.5, 16.0), "bottom": (23.5, 16.0), "middle": (16.0, 16.0)}
WHERE = {"left": "on the left", "right": "on the right", "top": "at the top", "bottom": "at the bottom", "middle": "in the middle"}
NOUNS = {"circle": ("circle", "ball", "disc"), "square": ("square", "box", "block"), "triangle": ("triangle", "triangle", "wedge")}


@dataclass(frozen=True)
class Thing:
    shape: str
    colour: str
    size: str
    place: str  # where it is: one of PLACES for a lone shape, left or right of a pair


def draw(things: list[Thing], rng: np.random.Generator) -> np.ndarray:
    """(SIZE, SIZE, 3) uint8: the shapes on a dark, noisy background, each jittered by up to 1.5 px."""
    image = rng.normal(30, 12, (SIZE, SIZE, 3))
    rows, cols = np.mgrid[0:SIZE, 0:SIZE].astype(float) + 0.5
    for thing in things:
        r0, c0 = PLACES[thing.place]
        r0, c0 = r0 + rng.uniform(-1.5, 1.5), c0 + rng.uniform(-1.5, 1.5)
        h = SIZES[thing.size]
        if thing.shape == "circle":
            mask = (rows - r0) ** 2 + (cols - c0) ** 2 <= h**2
        elif thing.shape == "square":
            mask = (np.abs(rows - r0) <= h * 0.85) & (np.abs(cols - c0) <= h * 0.85)
        else:  # apex up: the half-width grows linearly from the top to the base
            mask = (rows >= r0 - h) & (rows <= r0 + h) & (np.abs(cols - c0) <= (rows - (r0 - h)) / 2)
        shade = np.array(COLOURS[thing.colour]) + rng.normal(0, 10, 3)
        image[mask] = shade + rng.normal(0, 8, (int(mask.sum()), 3))
    return np.clip(image, 0, 255).astype(np.uint8)


# Templates for a lone shape and for a pair (first = left); {size1} etc. fill from the scene.
LONE = (
    "a {size1} {colour1} {noun1} {where1}",
    "a {colour1} {noun1} {where1} of the picture",
    "there is a {size1} {colour1} {noun1}",
    "one {colour1} {noun1} on a dark background",
    "a {size1} {noun1} that is {colour1}",
    "the image shows a {colour1} {noun1} {where1}",
    "a single {size1} {colour1} {noun1}",
    "a {colour1} {noun1} placed {where1}",
)
PAIR = (
    "a {colour1} {noun1} and a {colour2} {noun2}",
    "a {size1} {colour1} {noun1} to the left of a {size2} {colour2} {noun2}",
    "two shapes : a {colour1} {noun1} and a {colour2} {noun2}",
    "a {colour2} {noun2} to the right of a {colour1} {noun1}",
    "there are two shapes , a {size1} {noun1} and a {size2} {noun2}",
    "a {colour1} {noun1} on the left and a {colour2} {noun2} on the right",
    "the picture shows a {size1} {colour1} {noun1} next to a {size2} {colour2} {noun2}",
    "a {noun1} and a {noun2} side by side",
)


def captions_for(things: list[Thing], rng: np.random.Generator, n: int = 5) -> list[str]:
    """`n` captions of the scene from `n` different templates, each noun a synonym drawn anew."""
    templates = LONE if len(things) == 1 else PAIR
    out = []
    for i in rng.choice(len(templates), size=n, replace=False):
        fill = {}
        for k, t in enumerate(things, start=1):
            fill.update({f"size{k}": t.size, f"colour{k}": t.colour, f"where{k}": WHERE[t.place],
                         f"noun{k}": NOUNS[t.shape][rng.integers(len(NOUNS[t.shape]))]})
        out.append(templates[i].format(**fill))
    return out


def random_scene(rng: np.random.Generator) -> list[Thing]:
    """One shape (40%) anywhere, or two side by side (60%)."""
    def pick(place: str) -> Thing:
        return Thing(SHAPES[rng.integers(3)], list(COLOURS)[rng.integers(len(COLOURS))], list(SIZES)[rng.integers(2)], place)

    if rng.random() < 0.4:
        return [pick(list(PLACES)[rng.integers(len(PLACES))])]
    return [pick("left"), pick("right")]


def generate(n: int, seed: int) -> tuple[np.ndarray, list[list[str]], list[list[Thing]]]:
    """`n` scenes from `seed`: images (n, SIZE, SIZE, 3) uint8, five captions each, and the scenes."""
    rng = np.random.Generator(np.random.PCG64(seed))
    images, captions, scenes = [], [], []
    for _ in range(n):
        things = random_scene(rng)
        images.append(draw(things, rng))
        captions.append(captions_for(things, rng))
        scenes.append(things)
    return np.stack(images), captions, scenes
