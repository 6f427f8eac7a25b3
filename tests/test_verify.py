"""verify: every prepared mask against the mapping of its original, bit for bit; copied images and pack
members byte for byte; the packs' DALI indexes against their tars. It reports, never crashes: moved
originals, damaged masks, LZ4 forms, packs and indexes are each named."""

from __future__ import annotations

import json
import os

import cv2
import numpy as np
import pytest
from copies import colour_dataset, dataset

import daliloader as dl
from daliloader.cli import main as cli
from daliloader.errors import DataError, LoadError
from daliloader.manifest import load_manifest
from daliloader.preparation import MANIFEST, prepare, verify
from daliloader.verification import PairCheck, PreparedCopy, VerifyReport, check_pair


@pytest.fixture(scope="module")
def colour_data(tmp_path_factory) -> dl.SegmentationData:
    return colour_dataset(tmp_path_factory.mktemp("colour"))


def test_verify_passes_and_catches_a_changed_label(colour_data, tmp_path):
    out = tmp_path / "p"
    prepare(colour_data, out, pack_size=4, progress=False)
    report = verify(out, progress=False)
    assert report.ok and report.masks_checked == report.images_checked == len(colour_data)
    assert report.pack_members_checked == 4 * len(colour_data)  # image, mask, its GPU form, index
    mask = out / json.loads((out / MANIFEST).read_text())["pairs"][4][1]
    labels = cv2.imread(str(mask), cv2.IMREAD_UNCHANGED)
    labels[0, 0] = (labels[0, 0] + 1) % 32
    cv2.imwrite(str(mask), labels)
    report = verify(out, progress=False)
    assert not report.ok
    assert any(str(mask) in m and "1 pixels differ" in m for m in report.mismatches), report.mismatches
    assert any("packs" in m and "differs" in m for m in report.mismatches)  # the pack kept the old mask


def test_verify_names_a_damaged_gpu_mask(colour_data, tmp_path):
    out = tmp_path / "p"
    prepare(colour_data, out, progress=False)
    lz4 = out / json.loads((out / MANIFEST).read_text())["masks"]["gpu"]["files"][3]
    lz4.write_bytes(lz4.read_bytes()[:-9])
    report = verify(out, progress=False)
    assert not report.ok and any(str(lz4) in m and "does not inflate" in m for m in report.mismatches)


def test_verify_checks_the_pack_indexes(colour_data, tmp_path):
    """DALI's webdataset reader seeks by the .idx files: a missing or wrong one is reported, as the loader's
    own error tells the user to run verify."""
    out = tmp_path / "p"
    prepare(colour_data, out, pack_size=4, progress=False)
    assert verify(out, progress=False).indexes_checked == 2
    index = out / "packs" / "00001.idx"
    good = index.read_text()
    index.unlink()
    report = verify(out, progress=False)
    assert report.mismatches == [f"{index}: cannot read the index of {out / 'packs' / '00001.tar'} (No such file or "
                                 "directory): DALI's webdataset reader needs it; prepare the copy again"]
    with pytest.raises(DataError, match=f"pack file {index} is missing"):
        dl.SegmentationData.from_prepared(out, packs=True)
    for wrong in ("v1.2 8\n", good.replace(" 512 ", " 1024 ", 1), "\x00\xff" * 40):
        index.write_bytes(wrong.encode("latin-1"))
        (problem,) = verify(out, progress=False).mismatches
        assert problem.startswith(f"{index}: does not match {out / 'packs' / '00001.tar'}"), problem
    with pytest.raises(DataError, match=f"{index} is not a DALI webdataset index .*run `daliloader verify`"):
        dl.SegmentationData.from_prepared(out, packs=True)
    index.write_text(good)
    assert verify(out, progress=False).ok


def test_a_damaged_lz4_header_is_named_not_a_crash(colour_data, tmp_path):
    """A header that asks for a 1048576x1048576 mask: verify names the file; the guard of a loader that reads
    the masks' GPU form (dali-gpu where nvCOMP loads) refuses the pair (naming it) before the GPU inflater
    sees it; one that reads the PNG masks does not look at it."""
    from daliloader.guard import PairGuard

    out = tmp_path / "p"
    prepare(colour_data, out, progress=False)
    lz4 = out / json.loads((out / MANIFEST).read_text())["masks"]["gpu"]["files"][2]
    raw = bytearray(lz4.read_bytes())
    raw[4:12] = np.array([1 << 20, 1 << 20], "<i4").tobytes()
    lz4.write_bytes(bytes(raw))
    report = verify(out, progress=False)
    assert report.mismatches == [f"{lz4}: its header gives a 1048576x1048576 mask, which prepare never writes (1 to 16 "
                                 "MiB of indices): the prepared copy is damaged"]
    data = dl.SegmentationData.from_prepared(out)
    PairGuard(data, backend="dali-cpu").verify(2)  # reads the PNG masks
    PairGuard(data, backend="dali-gpu").verify(2)  # dali-gpu without nvCOMP reads them too
    with pytest.raises(LoadError, match=f"cannot load sample 2 .*\n  {lz4}: its header gives a 1048576x1048576 mask"):
        PairGuard(data, backend="dali-gpu", gpu_masks=True).verify(2)
    raw[4:12] = np.array([7, 9], "<i4").tobytes()  # a size, but not the image's
    lz4.write_bytes(bytes(raw))
    with pytest.raises(LoadError, match=f"{lz4}: its header gives 9x7 but its image is 56x40"):
        PairGuard(data, backend="dali-gpu", gpu_masks=True).verify(2)


def test_verify_reports_from_anywhere_after_sources_moved_and_on_a_truncated_pack(tmp_path, monkeypatch, capsys):
    """Prepared from relative paths, verified from another folder; then the originals move and a pack
    breaks off. (The command line in this process: the case is about folders, not processes.)"""
    dataset(tmp_path / "src", 12, 9)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    assert cli(["prepare", "src", "out", "--packs", "5", "--quiet"]) == 0, capsys.readouterr().err  # relative
    manifest = json.loads((out / MANIFEST).read_text())
    assert all(os.path.isabs(p) for p in manifest["source"]["images"] + manifest["source"]["masks"])
    monkeypatch.chdir("/")  # from another folder
    assert cli(["verify", str(out), "--quiet"]) == 0, capsys.readouterr().err
    assert "12 masks (and 12 of their LZ4 forms) equal the mapping of their originals" in capsys.readouterr().out
    os.rename(tmp_path / "src", tmp_path / "moved")  # the originals move
    tar = out / manifest["packs"]["tars"][1]
    tar.write_bytes(tar.read_bytes()[:3000])  # a pack breaks off
    report = verify(out, progress=False)
    assert not report.ok and report.originals_missing == 12 and report.masks_checked == 0
    assert report.gpu_masks_checked == 12  # against the prepared PNG masks, the originals gone
    text = "\n".join(report.mismatches)
    assert "the originals of 12 of 12 pairs are not where the manifest says" in text
    assert f"{tar}: breaks at byte" in text and "of 3000" in text
    assert "equal the mapping" not in str(report).splitlines()[0]
    assert "12 pairs not compared with their originals, which are missing" in str(report).splitlines()[0]
    assert cli(["verify", str(out), "--quiet"]) == 1  # (an exception would fail the test: no traceback)
    assert "Traceback" not in capsys.readouterr().err


# ---------------------------------------------------------------- the report and one pair's check, on fakes
def test_the_report_counts_each_pairs_check_and_says_what_it_compared():
    report = VerifyReport(pairs=3)
    report.add(PairCheck(mask=True, gpu_mask=True, image=True))
    report.add(PairCheck(("a.png: 1 pixels differ from the mapping of a_L.png",), mask=True, image=True))
    report.add(PairCheck(moved=True))
    assert (report.masks_checked, report.gpu_masks_checked, report.images_checked) == (2, 1, 2)
    assert not report.ok and report.mismatches == ["a.png: 1 pixels differ from the mapping of a_L.png"]
    assert str(report) == ("verified 3 pairs, comparing 2 masks (and 1 of their LZ4 forms) with the mapping of their "
                           "originals, 2 images byte for byte, 0 pack members with their sources\n1 MISMATCH(ES):\n"
                           "  a.png: 1 pixels differ from the mapping of a_L.png")
    fine = VerifyReport(pairs=2, masks_checked=2, images_checked=2, pack_members_checked=8, indexes_checked=1)
    assert fine.ok and str(fine) == ("verified 2 pairs: 2 masks equal the mapping of their originals, 2 images "
                                     "byte-identical, 8 pack members identical to their sources and 1 pack indexes "
                                     "that match their tars")
    many = VerifyReport(pairs=30, originals_missing=30, mismatches=[f"problem {i}" for i in range(25)])
    text = str(many)
    assert "; 30 pairs not compared with their originals, which are missing" in text.splitlines()[0]
    assert "25 MISMATCH(ES)" in text and "  problem 19" in text and "problem 20" not in text
    assert text.endswith("  ... and 5 more")


def test_one_pairs_check_names_what_is_missing_and_still_checks_the_rest(colour_data, tmp_path):
    out = tmp_path / "p"
    prepare(colour_data, out, progress=False)
    copy = PreparedCopy.of(out, load_manifest(out))
    assert check_pair(copy, 1) == PairCheck(mask=True, gpu_mask=True, image=True)
    mask = out / copy.pairs[1][1]
    mask.unlink()  # the prepared mask is gone: its LZ4 form is still compared with the original
    assert check_pair(copy, 1) == PairCheck((f"{mask}: missing, or not a single-channel 8-bit PNG",), gpu_mask=True,
                                            image=True)
    gone = PreparedCopy(copy.out, copy.pairs, copy.gpu_masks, copy.originals, copy.images,
                        [tmp_path / "nowhere.png"] * len(copy.pairs))  # the original mask moved
    check = check_pair(gone, 2)
    assert check == PairCheck(gpu_mask=True, image=True, moved=True)  # the LZ4 form against the PNG


def test_verify_refuses_what_is_no_prepared_copy(tmp_path):
    with pytest.raises(DataError, match=f"{tmp_path} is not a prepared dataset: {MANIFEST} is missing"):
        verify(tmp_path, progress=False)
    (tmp_path / MANIFEST).write_text(json.dumps({"format": "something else"}))
    with pytest.raises(DataError, match="not a daliloader-prepared manifest"):
        verify(tmp_path, progress=False)


def test_verify_says_which_sources_changed_since_the_copy_was_made(tmp_path, capsys):
    """A source edited or rewritten after prepare was reported as damage of the copy (pixels differ, a
    TFRecord's CRC fails), never as a change of the source. The manifest records each source's stamp,
    and verify says which changed (a note: the copy is not at fault), first of all where it also differs."""
    data = colour_dataset(tmp_path / "src")
    out = tmp_path / "p"
    prepare(data, out, progress=False)
    assert verify(out, progress=False).changed == []
    os.utime(data.images[0])  # touched (modification time only): its content is the same
    mask = data.masks[1]
    cv2.imwrite(mask, cv2.imread(mask)[::-1].copy())  # rewritten: other labels
    report = verify(out, progress=False)
    assert report.changed == [os.path.abspath(data.images[0]), os.path.abspath(mask)]
    assert not report.ok and any("pixels differ" in m for m in report.mismatches)
    assert cli(["verify", str(out), "--quiet"]) == 1
    said = capsys.readouterr().out
    assert "note: 2 source file(s) changed since the copy was made (first: " in said and "`daliloader prepare`" in said


def test_a_prepared_file_that_cannot_be_read_is_reported_not_raised(colour_data, tmp_path, monkeypatch):
    """verify stopped at a prepared mask it could not read (chmod 000) with one line and no report; it
    reports what it finds and goes on."""
    from daliloader import verification

    out = tmp_path / "p"
    prepare(colour_data, out, progress=False)
    denied = out / json.loads((out / MANIFEST).read_text())["pairs"][2][1]
    real = verification.decode_file

    def decode(path, flags):
        if path == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, flags)

    monkeypatch.setattr(verification, "decode_file", decode)
    report = verify(out, progress=False)
    assert not report.ok and f"{denied}: cannot read it (Permission denied)" in report.mismatches
    assert report.masks_checked == len(colour_data) - 1


def test_a_prepared_image_that_is_gone_is_said_once(colour_data, tmp_path):
    """With packs, the pairs' check and the packs' each found the deleted image and said so: twice."""
    out = tmp_path / "p"
    prepare(colour_data, out, pack_size=4, progress=False)
    image = sorted((out / "images").iterdir())[2]
    image.unlink()
    assert dl.verify(out, progress=False).mismatches == [f"{image}: cannot read it (No such file or directory)"]
