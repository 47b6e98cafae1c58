"""Unit tests of jaxpar.data: IDX parsing and the MNIST cache, all offline.

Downloads go through ``file://`` URLs into ``tmp_path``, and the checksum table is patched
to small fake files, so nothing here touches the network.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest

import jaxpar.data
from jaxpar import (
    MNIST,
    MNIST_SHA256,
    MNIST_URL,
    ChecksumMismatchError,
    DatasetUnavailableError,
    load_mnist,
    parse_idx,
)

NAMES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def idx(array: np.ndarray, type_code: int) -> bytes:
    """``array`` in the IDX format, with its values big-endian."""
    header = bytes([0, 0, type_code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class TestParseIdx:
    @pytest.mark.parametrize(
        ("type_code", "dtype"),
        [
            (0x08, np.uint8),
            (0x09, np.int8),
            (0x0B, np.int16),
            (0x0C, np.int32),
            (0x0D, np.float32),
            (0x0E, np.float64),
        ],
    )
    def test_every_type_plain_and_gzip(self, tmp_path, type_code, dtype):
        start = 0 if dtype == np.uint8 else -7
        array = np.arange(start, start + 24).astype(dtype).reshape(2, 3, 4)
        plain = tmp_path / "a.idx"
        plain.write_bytes(idx(array, type_code))
        packed = tmp_path / "a.idx.gz"
        packed.write_bytes(gzip.compress(plain.read_bytes()))
        for path in (plain, packed):
            parsed = parse_idx(path.read_bytes())
            assert parsed.dtype == np.dtype(dtype)
            assert parsed.dtype.isnative
            np.testing.assert_array_equal(parsed, array)
            parsed[0, 0, 0] = 1  # writable

    def test_big_endian_values(self):
        data = bytes([0, 0, 0x0B, 1]) + struct.pack(">I", 2) + b"\x01\x02\xff\xfe"
        assert parse_idx(data).tolist() == [0x0102, -2]

    def test_mnist_like_labels(self):
        labels = np.array([5, 0, 4, 1, 9], dtype=np.uint8)
        data = b"\x00\x00\x08\x01" + struct.pack(">I", 5) + labels.tobytes()
        assert struct.unpack(">I", data[:4]) == (2049,)  # MNIST's label magic number
        np.testing.assert_array_equal(parse_idx(data), labels)

    def test_zero_dimensions_is_a_scalar(self):
        assert parse_idx(b"\x00\x00\x08\x00\x07").shape == ()

    def test_bad_magic(self):
        with pytest.raises(ValueError, match="first bytes are 50 4b 03 04.*starts with 00 00"):
            parse_idx(b"PK\x03\x04rest")

    def test_too_short(self):
        with pytest.raises(ValueError, match="is 2 bytes long, too short"):
            parse_idx(b"\x00\x00")

    def test_unknown_type_code(self):
        with pytest.raises(ValueError, match=r"type code 0x0A, which is not one of .*0x08"):
            parse_idx(b"\x00\x00\x0a\x01" + struct.pack(">I", 1) + b"\x00")

    def test_truncated_header(self):
        with pytest.raises(ValueError, match="declares 3 dimensions, so a 16-byte header"):
            parse_idx(b"\x00\x00\x08\x03" + struct.pack(">I", 1))

    @pytest.mark.parametrize(("extra", "actual"), [(-1, 23), (1, 25)])
    def test_size_mismatch_names_both_byte_counts(self, extra, actual):
        data = idx(np.zeros((2, 3, 4), np.uint8), 0x08)
        data = data[:extra] if extra < 0 else data + b"\x00" * extra
        with pytest.raises(ValueError) as caught:
            parse_idx(data)
        message = str(caught.value)
        assert "dimensions (2, 3, 4) of 1-byte values" in message
        assert f"24 bytes of values after its 16-byte header, but it has {actual}" in message

    def test_size_mismatch_counts_item_size(self):
        data = idx(np.zeros(3, np.float64), 0x0E)[:-8]
        with pytest.raises(ValueError, match="24 bytes of values .* but it has 16"):
            parse_idx(data)

    @pytest.mark.parametrize(
        ("data", "shown"), [("text", "str 'text'"), (None, "None"), (Path("f.gz"), "PosixPath")]
    )
    def test_not_bytes(self, data, shown):
        with pytest.raises(TypeError) as caught:
            parse_idx(data)
        message = str(caught.value)
        assert f"parse_idx needs the contents of an IDX file as bytes, got {shown}" in message
        assert "parse_idx(Path(file).read_bytes())" in message

    def test_bytearray_and_memoryview(self):
        data = idx(np.arange(3, dtype=np.uint8), 0x08)
        assert parse_idx(bytearray(data)).tolist() == parse_idx(memoryview(data)).tolist()

    def test_corrupt_gzip(self):
        data = gzip.compress(idx(np.zeros(100, np.uint8), 0x08))[:-10]
        with pytest.raises(ValueError, match="gzip magic bytes 1f 8b but does not decompress"):
            parse_idx(data)


def test_published_checksums():
    assert MNIST_URL == "https://storage.googleapis.com/cvdf-datasets/mnist/"
    assert tuple(MNIST_SHA256) == NAMES
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in MNIST_SHA256.values())


def fake_mnist(train: int = 6, test: int = 4) -> dict[str, bytes]:
    """Gzipped IDX files shaped like MNIST's, with ``train`` and ``test`` examples."""
    rng = np.random.default_rng(0)
    arrays = {
        NAMES[0]: rng.integers(0, 256, (train, 28, 28), dtype=np.uint8),
        NAMES[1]: rng.integers(0, 10, train, dtype=np.uint8),
        NAMES[2]: rng.integers(0, 256, (test, 28, 28), dtype=np.uint8),
        NAMES[3]: rng.integers(0, 10, test, dtype=np.uint8),
    }
    return {name: gzip.compress(idx(array, 0x08), mtime=0) for name, array in arrays.items()}


@pytest.fixture
def files(monkeypatch) -> dict[str, bytes]:
    """Fake MNIST files, with the module's checksum table patched to match them."""
    data = fake_mnist()
    monkeypatch.setattr(jaxpar.data, "MNIST_SHA256", {n: sha256(b) for n, b in data.items()})
    monkeypatch.delenv("JAXPAR_DATA", raising=False)
    return data


def write(directory: Path, files: dict[str, bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return directory


def check(mnist: MNIST, files: dict[str, bytes]) -> None:
    assert mnist.train_images.shape == (6, 28, 28)
    assert mnist.train_labels.shape == (6,)
    assert mnist.test_images.shape == (4, 28, 28)
    assert mnist.test_labels.shape == (4,)
    assert mnist.train_images.dtype == mnist.test_labels.dtype == np.uint8
    for name, array in zip(NAMES, vars(mnist).values(), strict=True):
        np.testing.assert_array_equal(array, parse_idx(files[name]))


def unreachable(path: Path) -> str:
    return path.as_uri() + "/"


class TestLoadMnist:
    def test_cached_files_are_used_without_the_network(self, tmp_path, files):
        cache = write(tmp_path / "cache", files)
        mnist = load_mnist(cache, download=False)
        check(mnist, files)
        with pytest.raises(AttributeError):
            mnist.train_images = None  # frozen

    def test_cached_files_win_over_the_url(self, tmp_path, files):
        cache = write(tmp_path / "cache", files)
        check(load_mnist(str(cache), base_url=unreachable(tmp_path / "nowhere")), files)

    def test_download_through_a_file_url(self, tmp_path, files):
        mirror = write(tmp_path / "mirror", files)
        cache = tmp_path / "new" / "cache"
        check(load_mnist(cache, base_url=mirror.as_uri()), files)
        assert sorted(p.name for p in cache.iterdir()) == sorted(NAMES)  # no temporary left
        for name in NAMES:
            assert (cache / name).read_bytes() == files[name]
        for name in NAMES:
            (mirror / name).unlink()
        check(load_mnist(cache, base_url=mirror.as_uri()), files)  # now from the cache

    def test_only_missing_files_are_downloaded(self, tmp_path, files):
        cache = write(tmp_path / "cache", {NAMES[0]: files[NAMES[0]]})
        mirror = write(tmp_path / "mirror", {n: files[n] for n in NAMES[1:]})
        check(load_mnist(cache, base_url=mirror.as_uri() + "/"), files)

    def test_stale_cached_copy_is_replaced(self, tmp_path, files):
        cache = write(tmp_path / "cache", {**files, NAMES[1]: b"old"})
        mirror = write(tmp_path / "mirror", files)
        check(load_mnist(cache, base_url=mirror.as_uri()), files)
        assert (cache / NAMES[1]).read_bytes() == files[NAMES[1]]

    def test_default_cache_dir_is_jaxpar_data(self, tmp_path, files, monkeypatch):
        monkeypatch.setenv("JAXPAR_DATA", str(write(tmp_path / "env", files)))
        check(load_mnist(download=False), files)

    def test_default_cache_dir_is_in_the_home_directory(self, tmp_path, files, monkeypatch):
        monkeypatch.setenv("HOME", str(tmp_path))
        write(tmp_path / ".cache" / "jaxpar" / "mnist", files)
        check(load_mnist(download=False), files)

    def test_downloaded_checksum_mismatch_deletes_the_file(self, tmp_path, files):
        mirror = write(tmp_path / "mirror", {**files, NAMES[2]: b"tampered"})
        cache = tmp_path / "cache"
        with pytest.raises(ChecksumMismatchError) as caught:
            load_mnist(cache, base_url=mirror.as_uri())
        error = caught.value
        expected, actual = sha256(files[NAMES[2]]), sha256(b"tampered")
        assert (error.file_name, error.expected, error.actual) == (NAMES[2], expected, actual)
        message = str(error)
        assert NAMES[2] in message and expected in message and actual in message
        assert "deleted" in message
        assert not (cache / NAMES[2]).exists()
        assert sorted(p.name for p in cache.iterdir()) == sorted(NAMES[:2])

    def test_cached_checksum_mismatch_without_download_keeps_the_file(self, tmp_path, files):
        cache = write(tmp_path / "cache", {**files, NAMES[0]: b"fashion"})
        with pytest.raises(ChecksumMismatchError) as caught:
            load_mnist(cache, download=False)
        message = str(caught.value)
        assert sha256(b"fashion") in message and sha256(files[NAMES[0]]) in message
        assert "kept" in message and "download=True" in message
        assert (cache / NAMES[0]).read_bytes() == b"fashion"

    def test_no_download_and_empty_cache(self, tmp_path, files):
        cache = tmp_path / "empty"
        with pytest.raises(DatasetUnavailableError) as caught:
            load_mnist(cache, download=False, base_url="https://example.invalid/mnist")
        error = caught.value
        assert isinstance(error, RuntimeError)
        assert error.file_name == NAMES[0]
        assert error.cache_dir == cache
        assert error.url == "https://example.invalid/mnist/" + NAMES[0]
        assert "download=False" in error.reason
        message = str(error)
        for part in (NAMES[0], str(cache), error.url, "download=False", "JAXPAR_DATA"):
            assert part in message
        assert "Connect to the network" in message and f"into {cache}" in message
        assert all(name in message for name in NAMES)
        assert not cache.exists()  # nothing created

    def test_a_cache_dir_that_is_not_a_path(self):
        with pytest.raises(TypeError) as caught:
            load_mnist(123, download=False)
        message = str(caught.value)
        assert "cache_dir must be the path of a directory" in message
        assert "or None for the default ($JAXPAR_DATA, else ~/.cache/jaxpar/mnist); got 123." in (
            message
        )

    @pytest.mark.parametrize("how", ["cache_dir", "JAXPAR_DATA"])
    def test_a_cache_dir_that_is_a_file(self, tmp_path, files, monkeypatch, how):
        file = tmp_path / "mnist.tar"
        file.write_bytes(b"")
        monkeypatch.setenv("JAXPAR_DATA", str(file))
        with pytest.raises(NotADirectoryError) as caught:
            load_mnist(file if how == "cache_dir" else None, download=False)
        message = str(caught.value)
        assert f"the MNIST cache directory {file} is a file, not a directory" in message
        assert "Pass as cache_dir (or set JAXPAR_DATA to) a directory" in message

    def test_unreachable_url(self, tmp_path, files):
        cache = write(tmp_path / "cache", {n: files[n] for n in NAMES[:3]})
        base_url = unreachable(tmp_path / "missing")
        with pytest.raises(DatasetUnavailableError) as caught:
            load_mnist(cache, base_url=base_url)
        error = caught.value
        assert error.file_name == NAMES[3]
        assert error.url == base_url + NAMES[3]
        assert "No such file" in error.reason
        message = str(error)
        assert f"{NAMES[3]} is not in the cache directory {cache}" in message
        assert f"could not be downloaded from {error.url}: " in message
        assert error.reason in message
        assert "Connect to the network" in message and "JAXPAR_DATA" in message
        assert sorted(p.name for p in cache.iterdir()) == sorted(NAMES[:3])  # no temporary

    def test_unreachable_url_with_stale_copy_says_so(self, tmp_path, files):
        cache = write(tmp_path / "cache", {**files, NAMES[3]: b"stale"})
        with pytest.raises(DatasetUnavailableError, match=sha256(b"stale")):
            load_mnist(cache, base_url=unreachable(tmp_path / "missing"))

    def test_malformed_url(self, tmp_path, files):
        with pytest.raises(DatasetUnavailableError, match="unknown url type"):
            load_mnist(tmp_path / "cache", base_url="not a url")

    def test_wrong_shapes(self, tmp_path, files, monkeypatch):
        bad = {
            **files,
            NAMES[0]: idx(np.zeros((6, 28, 27), np.uint8), 0x08),
            NAMES[3]: idx(np.zeros(5, np.uint8), 0x08),
        }
        monkeypatch.setattr(jaxpar.data, "MNIST_SHA256", {n: sha256(b) for n, b in bad.items()})
        cache = write(tmp_path / "cache", bad)
        with pytest.raises(ValueError, match=r"shape \(6, 28, 27\), but MNIST images"):
            load_mnist(cache, download=False)
        bad[NAMES[0]] = files[NAMES[0]]
        monkeypatch.setattr(jaxpar.data, "MNIST_SHA256", {n: sha256(b) for n, b in bad.items()})
        write(cache, bad)
        with pytest.raises(ValueError, match="holds 4 images but .* holds 5 labels"):
            load_mnist(cache, download=False)
