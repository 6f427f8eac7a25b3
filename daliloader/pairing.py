"""Pairing the files of an image folder with those of a mask folder, by relative folder and stem."""

from __future__ import annotations

import contextvars
import errno
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import buckets
from .errors import DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
MASK_EXTENSIONS = (".png", ".bmp", ".tif", ".tiff")
#: Lossy formats, which are no masks: looked for where a mask folder holds none, to say why.
LOSSY_MASK_EXTENSIONS = (".jpg", ".jpeg", ".webp")
#: Why a JPEG or WebP file is no mask, and what to do.
LOSSY_WHY = ("compression changes the class ids near every edge into values of other classes or of none. Save "
             "the masks as PNG from their source (converting these files keeps the damage: each pixel would "
             "first have to be set to its nearest class value)")
#: Mask-name suffixes tried, in this order, when ``mask_suffix`` is not given.
COMMON_MASK_SUFFIXES = ("", "_L", "_mask", "_masks", "_label", "_labels", "_gt", "_seg",
                        "_segmentation", "_labelIds", "_gtFine_labelIds", "_gtFine_labelTrainIds", "-mask",
                        "-label")


@dataclass(frozen=True)
class Pairing:
    """The outcome of matching the files of an image folder with those of a mask folder."""

    pairs: list[tuple[str, str]]
    unpaired_images: list[str]
    unpaired_masks: list[str]
    mask_suffix: str
    #: files a split list names that do not exist: (file, the list), for Pascal VOC
    missing: list[tuple[str, str]] = field(default_factory=list)
    #: symbolic links that lead nowhere or into a loop of links: (link, why, as a phrase)
    broken_links: list[tuple[str, str]] = field(default_factory=list)
    #: folders that cannot be listed (permissions, I/O errors): (folder, why); their files are unknown
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    #: the tail stripped from image names before pairing (given, or detected: see :func:`detect_tails`)
    image_suffix: str = ""
    #: an image without a mask -> the JPEG or WebP file of its mask's name there (no mask: lossy)
    lossy_masks: dict[str, str] = field(default_factory=dict)

    def unpaired_image(self, image: str) -> str:
        """Why ``image`` has no partner, in words: no mask, or a mask in a lossy format."""
        lossy = self.lossy_masks.get(image)
        return "image without a mask" + (f" (its mask's name is there as {lossy}: a lossy format, which no mask "
                                         "can be)" if lossy else "")


def pair_files(images: str | Path, masks: str | Path, mask_suffix: str | None = None,
               image_suffix: str = "", only_suffixed: bool = False, prefer: str = "") -> Pairing:
    """Match images and masks by relative folder and stem (see :meth:`daliloader.data.SegmentationData.from_dirs`).

    Files left without a partner are listed, not raised: ``daliloader check`` reports them.
    ``only_suffixed``: files of the mask folder without ``mask_suffix`` are not masks (Cityscapes'
    ``gtFine`` also holds colour, instance and polygon files), so they are neither paired nor listed.
    Without suffixes, names that differ by more than a common mask suffix are paired by their tails
    (:func:`detect_tails`). Where several mask name endings pair as many images, ``prefer`` (the ending
    of the masks the class map reads: :func:`daliloader.classes.mask_ending`) is taken if it is one of
    them; otherwise they are refused, named (``_one_ending``).
    """
    _refuse_extension_suffix(mask_suffix=mask_suffix, image_suffix=image_suffix)
    if buckets.is_url(images) != buckets.is_url(masks):
        raise DataError(f"images {images} and masks {masks}: one is in a bucket (s3://) and one on a disk; keep a "
                        "dataset in one place")
    image_dir, mask_dir = buckets.as_path(images), buckets.as_path(masks)
    image_files, mask_files, broken, unreadable = _listed(image_dir, mask_dir)
    image_files, mask_files = _apart(image_files, image_dir, mask_files, mask_dir)
    if _same_folder(image_dir, mask_dir):  # images and masks side by side (a.tif beside a_mask.tif): told apart
        mask_suffix = _side_by_side(image_files, mask_files, mask_dir) if mask_suffix is None else mask_suffix
        if not mask_suffix:
            raise DataError(f"images and masks are both in {mask_dir}: mask_suffix='' tells no mask from an image; "
                            "pass the suffix the masks' names carry (a_mask.png beside a.png: '_mask')")
        image_files = [p for p in image_files if _key(p, image_dir, mask_suffix) is None]
        only_suffixed = True
    if only_suffixed:
        mask_files = [p for p in mask_files if _key(p, mask_dir, mask_suffix or "") is not None]
    _refuse_none_found(image_files, image_dir, mask_files, mask_dir)
    image_keys, unsuffixed = _image_keys(image_files, image_dir, image_suffix)
    guessing = mask_suffix is None and not image_suffix
    best, paired = _mask_suffix(mask_files, mask_dir, image_keys, mask_suffix, guessing, prefer)
    if guessing and paired < len(image_keys):
        tails = detect_tails(image_files, image_dir, mask_files, mask_dir, prefer)  # (Cityscapes: names differ more)
        if tails is not None:
            return pair_files(images, masks, tails[1], tails[0], only_suffixed=True)
    pairs, unpaired_images, unpaired_masks = _match(image_keys, mask_files, mask_dir, best)
    lossy = _lossy_partners(unpaired_images, image_keys, mask_dir, best)
    return Pairing(pairs, sorted(unpaired_images + unsuffixed), unpaired_masks, best, broken_links=broken,
                   unreadable=unreadable, image_suffix=image_suffix, lossy_masks=lossy)


def _refuse_extension_suffix(**suffixes: str | None) -> None:
    """A suffix is what a mask's (or image's) name adds to the pair's stem before the extension; one that
    ends with an extension ('.png') matched no file, and was said as "no masks found"."""
    for name, suffix in suffixes.items():
        if suffix and suffix.lower().endswith(tuple(IMAGE_EXTENSIONS) + tuple(MASK_EXTENSIONS)):
            raise DataError(f"{name}={suffix!r} ends with a file extension: the suffix is what a name adds to the "
                            "pair's stem before its extension (a_mask.png for a.jpg: '_mask'; the extension is "
                            "found by itself)")


def _mask_suffix(mask_files: list[Path], mask_dir: Path, image_keys: dict, given: str | None,
                 guessing: bool, prefer: str) -> tuple[str, int]:
    """The mask suffix (``given``, or the common one that pairs the most images) and how many images it
    pairs; ``guessing``, one of common suffixes that pair as many (``_one_ending``)."""
    suffixes = [given] if given is not None else list(COMMON_MASK_SUFFIXES)
    counts = {s: _count_pairs(mask_files, mask_dir, s, image_keys) for s in suffixes}
    best = max(suffixes, key=counts.get)
    if guessing and counts[best]:
        best = _one_ending(mask_dir, counts[best], [s for s in suffixes if counts[s] == counts[best]], "", prefer)
    return best, counts[best]


def _refuse_none_found(image_files: list[Path], image_dir: Path, mask_files: list[Path], mask_dir: Path) -> None:
    for found, kind, folder, extensions in ((image_files, "images", image_dir, IMAGE_EXTENSIONS),
                                            (mask_files, "masks", mask_dir, MASK_EXTENSIONS)):
        if not found:
            raise DataError(f"no {kind} ({', '.join(extensions)}) found under {folder}"
                            + (_lossy_masks(folder) if kind == "masks" else ""))


def _apart(image_files: list[Path], image_dir: Path, mask_files: list[Path], mask_dir: Path
           ) -> tuple[list[Path], list[Path]]:
    """The files of a mask folder inside the image folder (data/ + data/masks/) are no images, and those of
    an image folder inside the mask folder no masks."""
    if not _same_folder(image_dir, mask_dir):
        if _inside(mask_dir, image_dir):
            image_files = [p for p in image_files if not _inside(p, mask_dir)]
        elif _inside(image_dir, mask_dir):
            mask_files = [p for p in mask_files if not _inside(p, image_dir)]
    return image_files, mask_files


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies under ``folder``, their links followed (as :func:`_same_folder` compares)."""
    if not buckets.is_url(path):
        path, folder = os.path.realpath(path), os.path.realpath(folder)
    return str(path).startswith(str(folder).rstrip("/") + "/")


def _same_folder(a: Path, b: Path) -> bool:
    return a == b or (not buckets.is_url(a) and a.resolve() == b.resolve())


def _side_by_side(image_files: list[Path], mask_files: list[Path], folder: Path) -> str:
    """The mask suffix of a folder that holds images and masks side by side: the common one
    (:data:`COMMON_MASK_SUFFIXES`) that the most files carry beside a file of the same name without it."""
    stems = {_key(p, folder, "") for p in image_files}
    counts = {s: sum(1 for p in mask_files if _key(p, folder, s) in stems) for s in COMMON_MASK_SUFFIXES if s}
    best = max(counts, key=counts.get)
    if not counts[best]:
        raise DataError(f"images and masks are both in {folder}, and no file there carries a mask suffix beside an "
                        f"image of the same name (a.png beside a_mask.png; tried {', '.join(counts)}): pass "
                        "mask_suffix= (--mask-suffix), or keep the masks in a folder of their own")
    return best


def _lossy_partners(unpaired: list[str], image_keys: dict, mask_dir: Path, suffix: str) -> dict[str, str]:
    """Each image of ``unpaired`` whose mask's name is there in a lossy format (JPEG, WebP): -> that file."""
    if not unpaired:
        return {}
    lossy = {_key(p, mask_dir, suffix): str(p) for p in _list(mask_dir, LOSSY_MASK_EXTENSIONS)[0]}
    unpaired = set(unpaired)
    return {str(image): lossy[key] for key, image in image_keys.items() if str(image) in unpaired and key in lossy}


def _lossy_masks(folder: Path) -> str:
    """Why a mask folder without masks holds none, where it holds JPEG or WebP files (the end of the
    message), else ""."""
    lossy, _, _ = _list(folder, LOSSY_MASK_EXTENSIONS)
    if not lossy:
        return ""
    return (f", but {len(lossy)} JPEG/WebP file(s) are there ({lossy[0]}{', ...' if len(lossy) > 1 else ''}). "
            f"Masks cannot be stored in a lossy format: {LOSSY_WHY}")


def _listed(image_dir: Path, mask_dir: Path):
    """The image and mask files of two folders, and the links that lead nowhere and folders that cannot
    be read under them (refused, unless :func:`listing_problems` asks to list them)."""
    for what, d in (("images", image_dir), ("masks", mask_dir)):
        if not d.is_dir():
            raise DataError(f"{what} folder {d} does not exist or is not a folder")
        refuse_incomplete(d)
    (image_files, broken, unreadable), (mask_files, broken_masks, unreadable_masks) = (
        _list(image_dir, IMAGE_EXTENSIONS), _list(mask_dir, MASK_EXTENSIONS))
    broken, unreadable = broken + broken_masks, unreadable + unreadable_masks
    if (broken or unreadable) and not _LISTING.get():
        raise DataError(_unlisted(broken, unreadable, f"{image_dir} + {mask_dir}"))
    return image_files, mask_files, broken, unreadable


def _image_keys(image_files: list[Path], image_dir: Path, image_suffix: str) -> tuple[dict[str, Path], list[str]]:
    """Each image by its key (relative folder and stem, ``image_suffix`` cut), and the images whose name
    lacks ``image_suffix`` (no image of the layout: a stray file, listed without a partner); two images of
    one key are refused, named."""
    keys: dict[str, Path] = {}
    unsuffixed = []
    for p in image_files:
        key = _key(p, image_dir, image_suffix)
        if key is None:
            unsuffixed.append(str(p))
        elif key in keys:
            raise DataError(f"images {keys[key]} and {p} share a name (differing only in extension): keep one of them")
        else:
            keys[key] = p
    return keys, unsuffixed


def _match(image_keys: dict, mask_files: list[Path], mask_dir: Path, suffix: str):
    """The (image, mask) pairs of matching keys, in the images' order, the images without a mask and the
    masks without an image; an image with several masks is refused."""
    mask_keys: dict[str, list[Path]] = {}
    for p in mask_files:
        k = _key(p, mask_dir, suffix)
        if k is not None:
            mask_keys.setdefault(k, []).append(p)
    pairs, unpaired_images = [], []
    for k, img in sorted(image_keys.items()):
        found = mask_keys.pop(k, None)
        if not found:
            unpaired_images.append(str(img))
        elif len(found) > 1:
            raise DataError(f"image {img} has several masks: {', '.join(map(str, found))}")
        else:
            pairs.append((buckets.member(img), buckets.member(found[0])))
    paired_masks = {str(m) for _, m in pairs}
    return pairs, unpaired_images, [str(p) for p in mask_files if str(p) not in paired_masks]


def detect_tails(image_files: list[Path], image_dir: Path, mask_files: list[Path], mask_dir: Path,
                 prefer: str = "") -> tuple[str, str] | None:
    """The tails that image and mask names carry beyond their shared stem, where no common mask suffix
    pairs them (Cityscapes' ``_leftImg8bit`` and ``_gtFine_labelIds``): of the images' common tail, each
    part from a separator on, with the mask tail that then pairs the most images; a common mask suffix
    first where several do (gtFine holds ``_gtFine_color``, ``_gtFine_instanceIds`` and
    ``_gtFine_labelIds`` beside each image), then the shortest image tail; mask tails of equal rank are
    refused unless one is ``prefer`` (``_one_ending``). None where no tail pairs more images than
    the common mask suffixes do."""
    stems = [p.stem for p in image_files]
    common = os.path.commonprefix([s[::-1] for s in stems])[::-1][:min(map(len, stems)) - 1]
    ranked: dict[tuple, list[tuple[str, str]]] = {}  # rank -> the tails of that rank
    for image_tail in (common[i:] for i, char in enumerate(common) if char in "_-"):
        keys = {_key(p, image_dir, image_tail) for p in image_files}
        for mask_tail, n in _mask_tails(mask_files, mask_dir, keys).items():
            ranked.setdefault((n, mask_tail in COMMON_MASK_SUFFIXES, -len(image_tail)), []).append(
                (image_tail, mask_tail))
    plain = max(_count_pairs(mask_files, mask_dir, s, {_key(p, image_dir, ""): p for p in image_files})
                for s in COMMON_MASK_SUFFIXES)
    top = max(ranked, default=None)
    if top is None or top[0] <= plain:
        return None
    best = {mask_tail: image_tail for image_tail, mask_tail in ranked[top]}
    chosen = _one_ending(mask_dir, top[0], sorted(best), next(iter(best.values())), prefer)
    return best[chosen], chosen


def _one_ending(mask_dir: Path, n: int, endings: list[str], image_tail: str, prefer: str) -> str:
    """The one of mask name endings that pair as many images (``n``) as each other: the only one, or
    ``prefer`` (the ending of the masks the class map reads); others are refused, not guessed. gtFine after
    cityscapesScripts' ``createTrainIdLabelImgs`` holds ``_gtFine_labelIds`` and ``_gtFine_labelTrainIds``
    beside each image, and their tables differ. ``image_tail``: the tail the images' names then lose,
    which the example gives too."""
    if len(endings) == 1:
        return endings[0]
    if prefer and prefer in endings:
        return prefer
    named = ", ".join(repr(e) for e in endings)
    python = f"mask_suffix={endings[-1]!r}" + (f", image_suffix={image_tail!r}" if image_tail else "")
    shell = f"--mask-suffix={endings[-1]}" + (f" --image-suffix={image_tail}" if image_tail else "")
    raise DataError(f"the masks under {mask_dir} carry several name endings that each pair {n} images ({named}): "
                    f"say which files are the masks, for example {python} ({shell}), or name the published table "
                    "whose masks they are (classes='cityscapes' for labelIds, 'cityscapes-trainids' for "
                    "labelTrainIds)")


def _mask_tails(mask_files: list[Path], mask_dir: Path, keys: set) -> dict[str, int]:
    """Each tail that mask names carry after a key (relative folder and stem) from ``keys``, from a
    separator on, with how many masks carry it."""
    counts: dict[str, int] = {}
    for p in mask_files:
        folder, stem = p.parent.relative_to(mask_dir), p.stem
        for i, char in enumerate(stem):
            if char in "_-" and str(folder / stem[:i]) in keys:
                counts[stem[i:]] = counts.get(stem[i:], 0) + 1
    return counts


#: True while ``check`` pairs folders: links that lead nowhere and unreadable folders are then listed in
#: the Pairing, for check to report beside every other problem, instead of refused at once (the loaders
#: pair through layouts and data, which have no such switch: refusing is their default).
_LISTING = contextvars.ContextVar("daliloader_listing_problems", default=False)


@contextmanager
def listing_problems():
    """Within the block, :func:`pair_files` lists links that lead nowhere and folders it cannot read
    (``Pairing.broken_links``, ``Pairing.unreadable``) instead of raising a DataError about them."""
    token = _LISTING.set(True)
    try:
        yield
    finally:
        _LISTING.reset(token)


def _unlisted(broken: list[tuple[str, str]], unreadable: list[tuple[str, str]], where: str) -> str:
    """Why files under ``where`` cannot all be listed: each link that leads nowhere and each folder that
    cannot be read, with what to do."""
    what = [f"{len(broken)} symbolic link(s) lead nowhere"] if broken else []
    what += [f"{len(unreadable)} folder(s) cannot be read"] if unreadable else []
    lines = [f"  broken link: {link} -> {why}" for link, why in broken[:20]]
    lines += [f"  unreadable folder: {folder} ({why})" for folder, why in unreadable[:20]]
    more = len(broken) + len(unreadable) - len(lines)
    if more > 0:
        lines.append(f"  ... and {more} more")
    return (f"{' and '.join(what)} under {where}, so the dataset's files cannot all be listed:\n" + "\n".join(lines)
            + "\nRepair or remove the links, make the folders readable (`daliloader check` lists every problem)")


#: The file that marks a folder as the unfinished output of ``daliloader prepare``.
INCOMPLETE_MARKER = ".daliloader-incomplete"


def refuse_incomplete(folder: Path) -> None:
    """A folder inside the unfinished output of ``daliloader prepare`` is no dataset: refuse it."""
    for d in (folder, *list(folder.absolute().parents)[:2]):
        try:
            marked = (d / INCOMPLETE_MARKER).exists()
        except OSError:  # a folder that cannot be read: named as such where it is listed
            marked = False
        if marked:
            raise DataError(f"{d} is the unfinished output of a `daliloader prepare` (interrupted, or still running), "
                            "not a dataset: run the same prepare again, which removes it, or delete it")


def _list(folder: Path, extensions: tuple[str, ...]
          ) -> tuple[list[Path], list[tuple[str, str]], list[tuple[str, str]]]:
    """The files under ``folder`` with one of ``extensions``, symbolic links followed (a folder reached
    twice, as by a link back to a parent, is read once); the links that lead nowhere, as ``(link,
    why)``; and the folders that cannot be listed, as ``(folder, why)`` (os.walk would skip them). A
    folder of a bucket is read from its listing, which has neither links nor unreadable folders."""
    if isinstance(folder, buckets.BucketPath):
        return [p for p in folder.files() if p.suffix.lower() in extensions], [], []
    found, broken, seen, unreadable = [], [], set(), []

    def cannot_list(e: OSError) -> None:
        unreadable.append((str(e.filename), e.strerror or str(e)))

    for top, dirs, files in os.walk(folder, followlinks=True, onerror=cannot_list):
        real = os.path.realpath(top)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        for name in sorted(dirs) + sorted(files):
            path = Path(top) / name
            if path.is_symlink() and not path.exists():
                broken.append((str(path), _dead_end(path)))
            elif name in files and path.suffix.lower() in extensions and path.is_file():
                found.append(path)
    return sorted(found), broken, unreadable


def _dead_end(link: Path) -> str:
    """Where a link that leads nowhere points, and why that is nowhere, as a phrase."""
    target = os.readlink(link)
    try:
        os.stat(link)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"{target}, a loop of links that never reaches a file"
        if e.errno != errno.ENOENT:
            return f"{target}, which cannot be reached ({e.strerror})"
    return f"{target}, which does not exist"


def _key(path: Path, root: Path, suffix: str) -> str | None:
    """Relative folder + stem with ``suffix`` removed; None when the stem lacks the suffix."""
    stem = path.stem
    if suffix:
        if not stem.endswith(suffix):
            return None
        stem = stem[: -len(suffix)]
    return str(path.parent.relative_to(root) / stem)


def _count_pairs(masks: list[Path], root: Path, suffix: str, image_keys: dict) -> int:
    return sum(1 for p in masks if _key(p, root, suffix) in image_keys)
