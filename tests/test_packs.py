"""The packs: webdataset tars of the prepared files with DALI's index files, written, read back, and the
index a tar should have, which verify computes without DALI: the same text as DALI's own wds2idx."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from daliloader.errors import LoadError
from daliloader.manifest import PACKS_FOLDER
from daliloader.packs import index_text, member_name, members, sample_index, write_index, write_pack, write_packs

wds2idx = pytest.importorskip("wds2idx")


@pytest.fixture
def copy(tmp_path) -> tuple[Path, list[list[str]], list[str]]:
    """A copy's files, as prepare lays them out (their content: their own name, a few bytes)."""
    pairs, gpu = [], []
    for i in range(5):
        image, mask, lz4 = f"images/{i:07d}-a.{'jpg' if i % 2 else 'PNG'}", f"masks/{i:07d}-a.png", f"masks_lz4/{i}.lz4"
        for name in (image, mask, lz4):
            (tmp_path / name).parent.mkdir(exist_ok=True)
            (tmp_path / name).write_bytes(name.encode() * (i + 1))
        pairs.append([image, mask])
        gpu.append(lz4)
    return tmp_path, pairs, gpu


def dalis_index(tar: Path, tmp_path: Path, tar_utility: bool = True, monkeypatch=None) -> str:
    """The index DALI's wds2idx writes for ``tar`` (with GNU tar, or with its tarfile fallback)."""
    if not tar_utility:
        monkeypatch.setattr(wds2idx, "which", lambda name: None)
    with wds2idx.IndexCreator(str(tar), str(tmp_path / "dali.idx"), verbose=False) as creator:
        creator.create_index()
    return (tmp_path / "dali.idx").read_text()


def test_packs_hold_each_sample_in_order_with_the_index_dali_makes(copy):
    out, pairs, gpu = copy
    entry = write_packs(out, pairs, 2, gpu)
    assert entry.to_json() == {"format": "webdataset", "samples_per_pack": 2,
                               "tars": [f"{PACKS_FOLDER}/0000{p}.tar" for p in range(3)],
                               "indexes": [f"{PACKS_FOLDER}/0000{p}.idx" for p in range(3)],
                               "image_exts": ["jpg", "jpeg", "png", "bmp", "tif", "tiff", "webp"],
                               "mask_ext": "labels.png", "index_ext": "index", "gpu_mask_ext": "labels.lz4"}
    problems = []
    found = list(members(out / "packs" / "00001.tar", problems))
    assert not problems
    assert [m.name for m, _ in found] == ["0000002.png", "0000002.labels.png", "0000002.labels.lz4", "0000002.index",
                                          "0000003.jpg", "0000003.labels.png", "0000003.labels.lz4", "0000003.index"]
    assert [data for _, data in found][:4] == [(out / pairs[2][0]).read_bytes(), (out / pairs[2][1]).read_bytes(),
                                               (out / gpu[2]).read_bytes(), sample_index(2)]
    assert sample_index(3) == (3).to_bytes(8, "little") and member_name(3, "index") == "0000003.index"
    for p in range(3):
        tar = out / "packs" / f"0000{p}.tar"
        with tarfile.open(tar) as opened:
            text = index_text(opened.getmembers())
        assert (out / "packs" / f"0000{p}.idx").read_text() == text
    assert write_packs(out, pairs, 5, None).gpu_mask_ext is None  # no GPU form: no such members
    with tarfile.open(out / "packs" / "00000.tar") as opened:
        assert len(opened.getnames()) == 15


@pytest.mark.parametrize("tar_utility", [True, False], ids=["gnu tar", "tarfile fallback"])
def test_the_index_text_is_dalis_own_for_any_tar(tmp_path, monkeypatch, tar_utility):
    """index_text re-implements wds2idx.IndexCreator (verify runs without DALI): the same text for a
    USTAR tar (what prepare writes) of odd names: long paths (USTAR's prefix field), folders, hidden
    files, names without a dot, extensions with dots, samples that break and resume."""
    if tar_utility and shutil.which("tar") is None:
        pytest.skip("no GNU tar here: wds2idx falls back to tarfile")
    names = ["0000000.jpg", "0000000.labels.png", "sub/0000001.seg.tar.gz", "sub/0000001.x", ".hidden", "sub/.hid.png",
             "nodot", "0000000.again", "d" * 120 + "/" + "e" * 90 + ".png", "g.h/i"]
    tar_path = tmp_path / "odd.tar"
    with tarfile.open(tar_path, "w", format=tarfile.USTAR_FORMAT) as tar:
        folder = tarfile.TarInfo("sub")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for n, name in enumerate(names):
            member = tarfile.TarInfo(name)
            member.size = 100 * n + 1
            tar.addfile(member, io.BytesIO(bytes(member.size)))
    with tarfile.open(tar_path) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
    assert index_text(files) == dalis_index(tar_path, tmp_path, tar_utility, monkeypatch)


def test_a_damaged_header_midway_is_a_problem_not_the_tars_end(copy):
    """Python's tarfile reads a damaged member header after the first as the archive's end: the members
    after it went unread, and verify blamed the index instead. A tar cut inside its last member's padding
    is named at its own last byte (it was said to break a byte past its end)."""
    out, pairs, gpu = copy
    write_pack(out, pairs, range(0, 3), out / "a.tar", gpu)
    raw = bytearray((out / "a.tar").read_bytes())
    with tarfile.open(out / "a.tar") as tar:
        third = tar.getmembers()[2].offset
    raw[third + 10] ^= 0xFF  # the third member's name, so its header's checksum fails
    (out / "bad.tar").write_bytes(bytes(raw))
    problems = []
    assert len(list(members(out / "bad.tar", problems))) == 2
    assert problems == [f"{out / 'bad.tar'}: breaks at byte {third} of {len(raw)} (a member's header is damaged; the "
                        "members after it are not read): prepare the copy again"]
    ends = len(raw) - 1024
    while raw[ends - 1] == 0:
        ends -= 1
    problems = []
    (out / "short.tar").write_bytes((out / "a.tar").read_bytes()[:ends + 8])
    assert len(list(members(out / "short.tar", problems))) == 12
    (problem,) = problems
    assert problem.startswith(f"{out / 'short.tar'}: breaks at byte {ends + 8} of {ends + 8} (")


def test_a_broken_tar_is_a_problem_named_with_its_byte_not_an_exception(copy):
    out, pairs, gpu = copy
    write_pack(out, pairs, range(0, 3), out / "a.tar", gpu)
    raw = (out / "a.tar").read_bytes()
    (out / "cut.tar").write_bytes(raw[:3000])
    problems = []
    names = [m.name for m, _ in members(out / "cut.tar", problems)]
    assert names and len(names) < 12
    (problem,) = problems
    assert problem.startswith(f"{out / 'cut.tar'}: breaks at byte ") and " of 3000 (" in problem
    assert problem.endswith("truncated or damaged; prepare the copy again")
    problems = []
    assert list(members(out / "missing.tar", problems)) == []
    assert len(problems) == 1 and problems[0].startswith(f"{out / 'missing.tar'}: cannot be opened ("), problems
    with tarfile.open(out / "folder.tar", "w") as tar:
        folder = tarfile.TarInfo("0000000.jpg")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
    problems = []
    assert list(members(out / "folder.tar", problems)) == []
    assert problems == [f"{out / 'folder.tar'}: 0000000.jpg is not a file: the pack is damaged; prepare the copy again"]


def test_writing_a_pack_names_the_file_it_could_not_write(copy, monkeypatch):
    import daliloader.packs as packs

    out, pairs, gpu = copy
    (out / gpu[1]).unlink()
    with pytest.raises(OSError) as e:
        write_packs(out, pairs, 2, gpu)
    assert e.value.filename == str(out / gpu[1])
    (out / "empty.tar").write_bytes(bytes(1024))
    with pytest.raises(ValueError, match="empty"):  # wds2idx on a tar without members
        write_index(out / "empty.tar", out / "empty.idx")

    def no_index(tar_path, idx_path):
        raise ValueError("Webdataset Tar File empty")

    monkeypatch.setattr(packs, "write_index", no_index)
    with pytest.raises(LoadError, match=f"cannot write the pack {out / 'packs' / '00000.tar'}: Webdataset Tar File "
                                        "empty"):
        write_packs(out, pairs[:1], 2, None)
