from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pyweft.errors import ConfigurationError
from pyweft.storage import MemoryStorage, SQLiteStorage, Storage, open_storage
from pyweft.storage.factory import ENV_VAR, default_storage_url

Open = Callable[..., Storage]


@pytest.fixture(autouse=True)
def in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    return tmp_path


@pytest.fixture
async def opened() -> AsyncIterator[Open]:
    """``open_storage`` that closes whatever it opened when the test ends."""
    stores: list[Storage] = []

    def open_and_track(*args: object, **kwargs: object) -> Storage:
        store = open_storage(*args, **kwargs)  # type: ignore[arg-type]
        stores.append(store)
        return store

    yield open_and_track
    for store in stores:
        await store.close()


def sqlite(store: Storage) -> SQLiteStorage:
    assert isinstance(store, SQLiteStorage)
    return store


# --- accepted forms -------------------------------------------------------------------


def test_memory_url_opens_a_memory_storage(opened: Open) -> None:
    assert isinstance(opened("memory://"), MemoryStorage)


def test_sqlite_url_with_three_slashes_is_relative_to_the_working_directory(
    opened: Open, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    store = sqlite(opened("sqlite:///data/runs.db"))
    assert Path(store.path).resolve() == tmp_path / "data" / "runs.db"
    assert (tmp_path / "data" / "runs.db").exists()


def test_sqlite_url_with_four_slashes_is_absolute(opened: Open, tmp_path: Path) -> None:
    target = tmp_path / "abs.db"
    store = sqlite(opened(f"sqlite:///{target}"))
    assert store.path == str(target)
    assert target.exists()


def test_sqlite_url_path_is_percent_decoded(opened: Open, tmp_path: Path) -> None:
    store = sqlite(opened("sqlite:///my%20runs.db"))
    assert Path(store.path).resolve() == tmp_path / "my runs.db"


def test_sqlite_url_accepts_a_synchronous_option(opened: Open) -> None:
    store = sqlite(opened("sqlite:///fast.db?synchronous=NORMAL"))
    assert store.synchronous == "NORMAL"
    assert store.capabilities.durable_commit is False


def test_the_url_synchronous_option_wins_over_the_keyword(opened: Open) -> None:
    store = sqlite(opened("sqlite:///x.db?synchronous=full", sqlite_synchronous="NORMAL"))
    assert store.synchronous == "FULL"


def test_sqlite_synchronous_keyword_applies_when_the_url_says_nothing(opened: Open) -> None:
    assert sqlite(opened("sqlite:///x.db", sqlite_synchronous="NORMAL")).synchronous == "NORMAL"
    assert sqlite(opened("y.sqlite", sqlite_synchronous="NORMAL")).synchronous == "NORMAL"


@pytest.mark.parametrize("name", ["runs.db", "runs.sqlite", "runs.sqlite3", "RUNS.DB"])
def test_plain_paths_with_a_sqlite_suffix_open_sqlite(
    opened: Open, tmp_path: Path, name: str
) -> None:
    store = sqlite(opened(name))
    assert store.synchronous == "FULL"
    assert (tmp_path / name).exists()


def test_no_url_opens_pyweft_db_in_the_working_directory(opened: Open, tmp_path: Path) -> None:
    store = sqlite(opened(None))
    assert Path(store.path).resolve() == tmp_path / "pyweft.db"
    assert (tmp_path / "pyweft.db").exists()


def test_no_url_uses_pyweft_database_url_when_set(
    opened: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, "memory://")
    assert isinstance(opened(None), MemoryStorage)


def test_default_storage_url_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_storage_url() == "sqlite:///pyweft.db"
    monkeypatch.setenv(ENV_VAR, "sqlite:////srv/pyweft.db")
    assert default_storage_url() == "sqlite:////srv/pyweft.db"
    monkeypatch.setenv(ENV_VAR, "  ")
    assert default_storage_url() == "sqlite:///pyweft.db"


# --- rejected forms -------------------------------------------------------------------


@pytest.mark.parametrize("url", ["sqlite://:memory:", "sqlite:///:memory:"])
def test_in_memory_sqlite_urls_point_to_memory_url(url: str) -> None:
    with pytest.raises(ConfigurationError, match="use memory://") as info:
        open_storage(url)
    assert url in str(info.value)


@pytest.mark.parametrize(
    "url", ["mysql://localhost/db", "runs.txt", "runs", "redis://x", "file:///tmp/x.db"]
)
def test_unsupported_urls_name_the_url_and_the_supported_forms(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_storage(url)
    message = str(info.value)
    assert url in message
    for form in ("sqlite:///", "sqlite:////", "memory://", ".db"):
        assert form in message


def test_unsupported_urls_do_not_echo_passwords() -> None:
    with pytest.raises(ConfigurationError) as info:
        open_storage("mysql://app:s3cret@localhost/db")
    assert "s3cret" not in str(info.value)
    assert "mysql://app:***@localhost/db" in str(info.value)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite:///data/"])
def test_sqlite_urls_without_a_file_are_rejected(url: str) -> None:
    with pytest.raises(ConfigurationError, match="names no database file"):
        open_storage(url)


def test_sqlite_urls_with_a_host_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="sqlite:////absolute") as info:
        open_storage("sqlite://server/runs.db")
    assert "'server'" in str(info.value)


def test_unknown_sqlite_options_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="'journal_mode'"):
        open_storage("sqlite:///x.db?journal_mode=DELETE")


def test_an_invalid_synchronous_option_names_the_allowed_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="FULL, NORMAL"):
        open_storage("sqlite:///x.db?synchronous=OFF")
    assert not (tmp_path / "x.db").exists()


def test_memory_urls_take_no_path() -> None:
    with pytest.raises(ConfigurationError, match="memory:// takes no path"):
        open_storage("memory://somewhere")


def test_a_missing_directory_in_a_sqlite_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        open_storage("sqlite:///missing/dir/runs.db")
