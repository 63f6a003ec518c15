"""Anchors that bear load: the real software a signature names decides how the task's inputs arrive.

A signature may name an anchor (a taxonomy entry: OpenSSL, SQLite, zstd, git, ...). A sentence
about it in the instruction changes nothing the verdict depends on, so an anchor is applied as a
transformation of the task instead, the same for every family: after the family's own setup (and
a fixture kind's container, generate.compose) everything under /app is packed into the anchor's
own format and /app is left holding only that packed form, in `INBOX`. The anchor's tool (or its
format's semantics: a cipher's key derivation, a table's columns, a package's layout) is then the
only way to the inputs, so a solution that ignores the anchor has nothing to compute the
deliverable from, and the family's own final test fails it. The oracle unpacks first, with the
reference decoder here, then runs the family's solution unchanged.

Only anchors listed in `ANCHORS` can be applied; the signature sampler asks each domain only for
those (`load_bearing_anchors_by_domain`), and task.json's `honoured.anchor` is true only when the
transformation was applied (`anchor_plan`). The packed form keeps every path, file mode, empty
directory and symlink of /app (git: the executable bit, and no empty directory), so the family's
task is otherwise the same task; the reference decoders restore modes exactly (a tar extracted by
a user other than root applies the umask unless told `-p`).
"""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass, replace
from typing import ClassVar

from termforge.generate.base import TaskFamily, TaskSpec, bash_script, pytest_module
from termforge.generate.bundles import INBOX, PACK_SOURCE
from termforge.generate.families import CALIBRATION_KIND, all_families
from termforge.schemas import with_packing_step

# The packed /app as a gzip-compressed tar (bundles.PACK_SOURCE makes it), on its way into the
# anchor's format during setup; the oracle's decoders put it back the same way.
STAGING = "/tmp/termforge-anchor"
TAR_GZ = f"{STAGING}/app.tar.gz"

# Python run by setup after the family's setup: /app -> TAR_GZ, /app emptied.
_STAGE_APP = "\n".join([PACK_SOURCE, "import os", f"os.makedirs({STAGING!r}, exist_ok=True)",
                        f"open({TAR_GZ!r}, 'wb').write(pack_app())", f"os.makedirs({INBOX!r}, exist_ok=True)"])

# Entries of a tar archive as rows (path, type, mode, data), and back: the shape the row formats
# (SQLite, JSON, NumPy) store. data is a file's bytes or a symlink's target.
_TAR_TO_ROWS = '''
import io, tarfile

def tar_rows(tar_gz_path):
    rows = []
    with tarfile.open(tar_gz_path, "r:gz") as tar:
        for m in tar.getmembers():
            if m.isdir():
                rows.append((m.name, "dir", m.mode & 0o7777, b""))
            elif m.issym():
                rows.append((m.name, "symlink", m.mode & 0o7777, m.linkname.encode()))
            elif m.isreg():
                rows.append((m.name, "file", m.mode & 0o7777, tar.extractfile(m).read()))
            else:
                raise ValueError(f"{m.name}: only files, directories and symlinks can be packed")
    return rows
'''
_ROWS_TO_APP = '''
import os

def restore_rows(rows, root="/app"):
    dir_modes = []
    for path, kind, mode, data in sorted(rows, key=lambda r: r[0]):
        full = os.path.join(root, path)
        if kind == "dir":
            os.makedirs(full, exist_ok=True)
            dir_modes.append((full, mode))
            continue
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if kind == "symlink":
            os.symlink(data.decode(), full)
        else:
            with open(full, "wb") as fh:
                fh.write(data)
            os.chmod(full, mode)
    # Directory modes last: a read-only directory must still take its files first.
    for full, mode in sorted(dir_modes, reverse=True):
        os.chmod(full, mode)
'''


def _python(code: str, tag: str) -> str:
    return f"python3 - <<'{tag}'\n{code.strip()}\n{tag}\n"


class Anchor:
    """One anchor: the packed form of /app its tool reads, and how it is made and undone."""

    name: ClassVar[str]
    """The anchor exactly as the taxonomy spells it."""
    apt_packages: ClassVar[tuple[str, ...]] = ()
    """Debian packages that give the agent the anchor's tool (the oracle needs them too)."""
    artefacts: ClassVar[tuple[str, ...]]
    """The paths (globs allowed) /app holds once packed: the initial test's whole listing."""

    def params(self, rng: random.Random) -> dict:
        return {}

    def pack(self, params: dict) -> str:  # pragma: no cover - interface
        """Bash run by setup once TAR_GZ holds /app: write the packed form into INBOX."""
        raise NotImplementedError

    def unpack(self, params: dict) -> str:  # pragma: no cover - interface
        """Bash the oracle runs first: the files back under /app from the packed form."""
        raise NotImplementedError

    def describe(self, params: dict) -> str:  # pragma: no cover - interface
        """What the agent is told about the packed form (enough to undo it, with the anchor's tool)."""
        raise NotImplementedError


class GnuTar(Anchor):
    name = "GNU tar"
    artefacts = (f"{INBOX}/inputs.tar.gz",)

    def params(self, rng):
        return {"top": rng.choice(("inputs", "export", "snapshot", "payload"))}

    def pack(self, p):
        return (f"mkdir -p {STAGING}/tree/{p['top']} && tar -xzpf {TAR_GZ} -C {STAGING}/tree/{p['top']}\n"
                f"tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf {self.artefacts[0]} "
                f"-C {STAGING}/tree {p['top']}\n")

    def unpack(self, p):
        return f"tar -xzpf {self.artefacts[0]} -C /app --strip-components=1\n"

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is a gzip-compressed GNU tar archive of those files, all inside one "
                f"top-level directory `{p['top']}/` that stands for `/app` itself (file modes kept).")


class Zstd(Anchor):
    name = "zstd"
    apt_packages = ("zstd",)
    artefacts = (f"{INBOX}/inputs.tar.zst",)

    def params(self, rng):
        return {"level": rng.choice((3, 9, 19))}

    def pack(self, p):
        return f"gzip -dc {TAR_GZ} | zstd -q -{p['level']} -o {self.artefacts[0]}\n"

    def unpack(self, p):
        return f"zstd -q -dc {self.artefacts[0]} | tar -xp -C /app\n"

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is a tar archive of those files (paths relative to `/app`, file modes "
                "kept), compressed with zstd (not gzip).")


class Coreutils(Anchor):
    name = "GNU coreutils"
    artefacts = (f"{INBOX}/inputs.b64.*",)

    def params(self, rng):
        # A number of pieces, not a piece size: the inputs' size is only known inside the sandbox.
        return {"pieces": rng.choice((3, 5, 8, 13))}

    def pack(self, p):
        # split -n needs the size up front: a file, not a pipe.
        return (f"base64 -w 76 {TAR_GZ} > {STAGING}/app.b64\n"
                f"split -d -a 3 -n l/{p['pieces']} {STAGING}/app.b64 {INBOX}/inputs.b64.\n")

    def unpack(self, p):
        return f"cat {INBOX}/inputs.b64.* | base64 -d | tar -xzp -C /app\n"

    def describe(self, p):
        return (f"A gzip-compressed tar archive of those files (paths relative to `/app`, file modes kept) was "
                f"base64-encoded and cut with `split -d -a 3 -n l/{p['pieces']}` into the pieces "
                f"`{INBOX}/inputs.b64.000`, `.001`, ...: join them in order and decode.")


class OpenSsl(Anchor):
    name = "OpenSSL"
    apt_packages = ("openssl",)
    artefacts = (f"{INBOX}/inputs.tar.gz.enc",)
    _WORDS = ("amber", "basalt", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
              "krypton", "lumen", "meadow", "nickel", "onyx", "pollen", "quartz", "russet", "sierra", "tundra")

    def params(self, rng):
        return {"cipher": rng.choice(("aes-256-cbc", "aes-128-cbc", "aes-256-ctr")),
                "iter": rng.choice((1000, 25000, 60000)), "md": rng.choice(("sha256", "sha512")),
                "passphrase": "-".join(rng.sample(self._WORDS, 3)) + str(rng.randrange(10, 100))}

    def _enc(self, p):
        return f"openssl enc -{p['cipher']} -pbkdf2 -iter {p['iter']} -md {p['md']} -pass pass:{p['passphrase']}"

    def pack(self, p):
        return f"{self._enc(p)} -salt -in {TAR_GZ} -out {self.artefacts[0]}\n"

    def unpack(self, p):
        return f"{self._enc(p)} -d -in {self.artefacts[0]} | tar -xzp -C /app\n"

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is a gzip-compressed tar archive of those files (paths relative to "
                f"`/app`, file modes kept), encrypted by `openssl enc` with cipher {p['cipher']}, the key "
                f"derived by PBKDF2 ({p['iter']} iterations, digest {p['md']}, a salt in the file's header) from "
                f"the passphrase `{p['passphrase']}`.")


class Sqlite(Anchor):
    name = "SQLite"
    apt_packages = ("sqlite3",)
    artefacts = (f"{INBOX}/inputs.db",)

    def params(self, rng):
        return {"table": rng.choice(("entries", "app_files", "snapshot"))}

    def pack(self, p):
        return _python("\n".join([_TAR_TO_ROWS, "import sqlite3", f"db = sqlite3.connect({self.artefacts[0]!r})",
                                  f"db.execute('CREATE TABLE {p['table']} (path TEXT PRIMARY KEY, type TEXT NOT NULL, "
                                  "mode INTEGER NOT NULL, data BLOB NOT NULL)')",
                                  f"db.executemany('INSERT INTO {p['table']} VALUES (?, ?, ?, ?)', tar_rows({TAR_GZ!r}))",
                                  "db.commit()", "db.close()"]), "TERMFORGE_ANCHOR_SQLITE")

    def unpack(self, p):
        return _python("\n".join([_ROWS_TO_APP, "import sqlite3", f"db = sqlite3.connect({self.artefacts[0]!r})",
                                  f"restore_rows(db.execute('SELECT path, type, mode, data FROM {p['table']}').fetchall())"]),
                       "TERMFORGE_ANCHOR_SQLITE")

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is an SQLite database. Its table `{p['table']}` has one row per file, "
                "directory and symlink: `path` (relative to `/app`), `type` (`file`, `dir` or `symlink`), `mode` "
                "(the permission bits, an integer) and `data` (a BLOB: a file's bytes, a symlink's target, empty "
                "for a directory).")


class Jq(Anchor):
    name = "jq"
    apt_packages = ("jq",)
    artefacts = (f"{INBOX}/inputs.json",)

    def params(self, rng):
        return {"key": rng.choice(("entries", "tree", "files"))}

    def pack(self, p):
        return _python("\n".join([_TAR_TO_ROWS, "import base64, json",
                                  "rows = [{'path': r[0], 'type': r[1], 'mode': format(r[2], '04o'), "
                                  "'base64': base64.b64encode(r[3]).decode()} for r in tar_rows(%r)]" % TAR_GZ,
                                  f"doc = {{'format': 1, 'root': '/app', {p['key']!r}: rows}}",
                                  f"open({self.artefacts[0]!r}, 'w').write(json.dumps(doc, indent=1))"]),
                       "TERMFORGE_ANCHOR_JQ")

    def unpack(self, p):
        return _python("\n".join([_ROWS_TO_APP, "import base64, json",
                                  f"doc = json.load(open({self.artefacts[0]!r}))",
                                  f"restore_rows([(e['path'], e['type'], int(e['mode'], 8), base64.b64decode(e['base64'])) "
                                  f"for e in doc[{p['key']!r}]])"]), "TERMFORGE_ANCHOR_JQ")

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is a JSON document; its array `.{p['key']}` has one object per file, "
                "directory and symlink: `.path` (relative to `/app`), `.type` (`file`, `dir` or `symlink`), "
                "`.mode` (octal permission bits, a string) and `.base64` (base64 of a file's bytes or a "
                "symlink's target; empty for a directory).")


class Numpy(Anchor):
    name = "NumPy"
    artefacts = (f"{INBOX}/inputs.npz",)

    def params(self, rng):
        return {"prefix": rng.choice(("blob_", "entry_", "part_"))}

    def pack(self, p):
        return _python("\n".join([_TAR_TO_ROWS, "import json, numpy as np", "rows = tar_rows(%r)" % TAR_GZ,
                                  f"arrays = {{f'{p['prefix']}{{i}}': np.frombuffer(r[3], dtype=np.uint8) "
                                  "for i, r in enumerate(rows)}",
                                  f"manifest = [[r[0], r[1], r[2], f'{p['prefix']}{{i}}'] for i, r in enumerate(rows)]",
                                  "arrays['manifest'] = np.array(json.dumps(manifest))",
                                  f"np.savez_compressed({self.artefacts[0]!r}, **arrays)"]), "TERMFORGE_ANCHOR_NPZ")

    def unpack(self, p):
        return _python("\n".join([_ROWS_TO_APP, "import json, numpy as np",
                                  f"z = np.load({self.artefacts[0]!r}, allow_pickle=False)",
                                  "restore_rows([(path, kind, mode, z[key].tobytes()) "
                                  "for path, kind, mode, key in json.loads(str(z['manifest']))])"]),
                       "TERMFORGE_ANCHOR_NPZ")

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is a NumPy `.npz` archive (load it with `allow_pickle=False`). Its "
                "array `manifest` is a 0-d string holding JSON: a list of `[path, type, mode, key]`, one per file, "
                "directory and symlink (path relative to `/app`; type `file`, `dir` or `symlink`; mode the "
                f"permission bits as an integer); the uint8 array named `key` (`{p['prefix']}0`, ...) holds a "
                "file's bytes or a symlink's target.")


class Git(Anchor):
    name = "git"
    apt_packages = ("git",)
    artefacts = (f"{INBOX}/inputs.bundle",)
    # Fixed identity and dates, no system or user config: the bundle depends on the inputs alone.
    _GIT = ("env HOME={s} GIT_CONFIG_NOSYSTEM=1 "
            "GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z "
            "git -c user.name=p -c user.email=p@p -c init.defaultBranch=main")

    def params(self, rng):
        return {"branch": rng.choice(("inputs", "snapshot", "handover")), "decoy": rng.choice(("draft", "wip"))}

    def pack(self, p):
        git = self._GIT.format(s=STAGING)
        work = f"{STAGING}/repo"
        # The branch that holds the inputs is named in the instruction; the other branch holds an
        # abandoned draft (only the first half of the files), so the branch matters, not just the bundle.
        return textwrap.dedent(f"""\
            mkdir -p {work} && cd {work}
            {git} init -q
            {git} checkout -q -b {p['decoy']}
            tar -xzpf {TAR_GZ} -C {work}
            if find {work} -mindepth 1 -name .git -prune -o -type d -empty -print | grep -q . \\
                || find {work} -mindepth 2 -name .git | grep -q .; then
              echo "git keeps no empty directory or nested repository: this task cannot be a git bundle" >&2
              exit 1
            fi
            {git} add -A && {git} commit -q -m "inputs"
            {git} branch {p['branch']}
            n=$({git} ls-files -z | tr -cd '\\0' | wc -c)
            {git} ls-files -z | head -z -n $(( (n + 1) / 2 )) | xargs -0 -r {git} rm -q --cached --
            {git} commit -q --allow-empty -m "draft"
            {git} bundle create -q {self.artefacts[0]} {p['decoy']} {p['branch']}
            cd /app
            """)

    def unpack(self, p):
        git = self._GIT.format(s=STAGING)
        return (f"mkdir -p {STAGING} && {git} clone -q -b {p['branch']} {self.artefacts[0]} {STAGING}/clone\n"
                f"{git} -C {STAGING}/clone -c tar.umask=0022 archive --format=tar HEAD | tar -xp -C /app\n")

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is a git bundle. The files are the tree of its branch `{p['branch']}` "
                f"(paths relative to `/app`; git keeps only the executable bit of a mode); its branch `{p['decoy']}` "
                "is an abandoned draft, not the inputs.")


class Apt(Anchor):
    name = "APT"
    artefacts = (f"{INBOX}/inputs.deb",)
    PREFIX = "srv/task-inputs"

    def params(self, rng):
        return {"package": rng.choice(("site-inputs", "ops-handover", "task-data")),
                "version": f"{rng.randint(1, 4)}.{rng.randint(0, 9)}-{rng.randint(1, 3)}"}

    def pack(self, p):
        pkg = f"{STAGING}/pkg"
        control = (f"Package: {p['package']}\nVersion: {p['version']}\nArchitecture: all\n"
                   f"Maintainer: p <p@p>\nDescription: files\n")
        return (f"mkdir -p {pkg}/DEBIAN {pkg}/{self.PREFIX} && chmod 0755 {pkg} {pkg}/DEBIAN\n"
                f"cat > {pkg}/DEBIAN/control <<'TERMFORGE_ANCHOR_CONTROL'\n{control}TERMFORGE_ANCHOR_CONTROL\n"
                f"tar -xzpf {TAR_GZ} -C {pkg}/{self.PREFIX}\n"
                f"dpkg-deb --root-owner-group -Zgzip --build {pkg} {self.artefacts[0]} >/dev/null\n")

    def unpack(self, p):
        return (f"mkdir -p {STAGING}/x && dpkg-deb --fsys-tarfile {self.artefacts[0]} | tar -xp -C {STAGING}/x\n"
                f"cp -a {STAGING}/x/{self.PREFIX}/. /app/\n")

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is a Debian binary package ({p['package']} {p['version']}); the files are "
                f"what it would install under `/{self.PREFIX}/`, which stands for `/app` (file modes kept). Do not "
                "install it system-wide: extract it.")


class Hdf5(Anchor):
    name = "HDF5"
    apt_packages = ("python3-h5py",)
    artefacts = (f"{INBOX}/inputs.h5",)

    def params(self, rng):
        return {"root": rng.choice(("app", "snapshot", "inputs"))}

    def pack(self, p):
        return _python("\n".join([_TAR_TO_ROWS, "import h5py, numpy as np",
                                  f"with h5py.File({self.artefacts[0]!r}, 'w') as h5:",
                                  f"    top = h5.create_group({p['root']!r})",
                                  "    for path, kind, mode, data in sorted(tar_rows(%r)):" % TAR_GZ,
                                  "        node = top.require_group(path) if kind == 'dir' else "
                                  "top.create_dataset(path, data=np.frombuffer(data, dtype=np.uint8))",
                                  "        node.attrs['type'], node.attrs['mode'] = kind, mode"]),
                       "TERMFORGE_ANCHOR_HDF5")

    def unpack(self, p):
        return _python("\n".join([_ROWS_TO_APP, "import h5py, numpy as np", "rows = []",
                                  f"with h5py.File({self.artefacts[0]!r}, 'r') as h5:",
                                  f"    top = h5[{p['root']!r}]",
                                  "    def visit(name, node):",
                                  "        data = b'' if isinstance(node, h5py.Group) else np.asarray(node[()], dtype=np.uint8).tobytes()",
                                  "        rows.append((name, str(node.attrs['type']), int(node.attrs['mode']), data))",
                                  "    top.visititems(visit)",
                                  "restore_rows(rows)"]), "TERMFORGE_ANCHOR_HDF5")

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is an HDF5 file. Under its group `/{p['root']}` (which stands for `/app`) "
                "every directory is a group and every file or symlink a one-dimensional uint8 dataset (a file's "
                "bytes, a symlink's target), each with the attributes `type` (`dir`, `file` or `symlink`) and "
                "`mode` (the permission bits, an integer).")


class ExifTool(Anchor):
    name = "ExifTool"
    apt_packages = ("libimage-exiftool-perl",)
    artefacts = (f"{INBOX}/inputs.xmp",)
    # Simple (single-text) Dublin Core properties: one carries the archive, the others ordinary text.
    _FIELDS = ("source", "identifier", "rights", "coverage")

    def params(self, rng):
        field = rng.choice(self._FIELDS[:2])
        return {"field": field, "decoys": [f for f in self._FIELDS if f != field]}

    def pack(self, p):
        # An XMP sidecar: the whole file is metadata, so every byte of it is the task's input
        # (a picture carrying it would have pixels no answer depends on).
        return _python("\n".join([
            "import base64",
            f"fields = {{k: 'see the ticket' for k in {p['decoys']!r}}}",
            f"fields[{p['field']!r}] = base64.b64encode(open({TAR_GZ!r}, 'rb').read()).decode()",
            "props = ''.join(f'   <dc:{k}>{v}</dc:{k}>\\n' for k, v in sorted(fields.items()))",
            "open(%r, 'w', encoding='utf-8').write(\"<?xpacket begin='\\ufeff' id='W5M0MpCehiHzreSzNTczkc9d'?>\\n\"" % self.artefacts[0],
            "    \"<x:xmpmeta xmlns:x='adobe:ns:meta/'>\\n <rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'>\\n\"",
            "    \"  <rdf:Description rdf:about='' xmlns:dc='http://purl.org/dc/elements/1.1/'>\\n\" + props",
            "    + \"  </rdf:Description>\\n </rdf:RDF>\\n</x:xmpmeta>\\n<?xpacket end='w'?>\\n\")"]),
            "TERMFORGE_ANCHOR_XMP")

    def unpack(self, p):
        return f"exiftool -b -XMP-dc:{p['field'].capitalize()} {self.artefacts[0]} | base64 -d | tar -xzp -C /app\n"

    def describe(self, p):
        return (f"`{self.artefacts[0]}` is an XMP metadata sidecar; its Dublin Core field `{p['field']}` "
                f"(ExifTool's tag `XMP-dc:{p['field'].capitalize()}`) holds a base64-encoded, gzip-compressed tar "
                "archive of those files (paths relative to `/app`, file modes kept). Its other fields are not "
                "part of it.")

ANCHORS: dict[str, Anchor] = {a.name: a for a in (GnuTar(), Zstd(), Coreutils(), OpenSsl(), Sqlite(), Jq(), Numpy(),
                                                    Hdf5(), ExifTool(), Git(), Apt())}
"""Every anchor that can bear load, by its taxonomy name. An anchor not here is never drawn."""


def takes_anchors(fam: TaskFamily) -> bool:
    """Whether a family's task can take an anchor: its episodes explore (a one-command episode has
    no turn to unpack the inputs in)."""
    return fam.episode_protocol == "explore"


def anchor_plan(sig: dict, fam: TaskFamily) -> Anchor | None:
    """The anchor the task will really bear for this signature: the requested one when it is
    load-bearing and the family can take it, else none (task.json then records the mismatch)."""
    anchor = ANCHORS.get(sig.get("anchor") or "")
    return anchor if anchor is not None and takes_anchors(fam) else None


def load_bearing_anchors_by_domain(taxonomy: dict, families: list[TaskFamily]) -> dict[str, tuple[str, ...]]:
    """Domain -> the taxonomy anchors of the domain that some family there can bear (the signature
    sampler asks a domain only for these)."""
    out: dict[str, tuple[str, ...]] = {}
    for domain, body in taxonomy["domains"].items():
        if any(domain in f.domains and takes_anchors(f) for f in families):
            out[domain] = tuple(a for a in body["anchors"] if a in ANCHORS)
        else:
            out[domain] = ()
    return out


def anchorless_corpus_kinds(families: list[TaskFamily] | None = None) -> tuple[str, ...]:
    """Corpus kinds never asked for an anchor: the opt-in calibration kind, whose family's episodes
    are one command (takes_anchors), unless some opt-in family could bear one."""
    opt_in = [f for f in (all_families() if families is None else families) if f.opt_in]
    return () if any(takes_anchors(f) for f in opt_in) else (CALIBRATION_KIND,)


def _initial_test(anchor: Anchor, outputs: list[str]) -> str:
    return pytest_module(f'''
        import glob
        import os

        ARTEFACTS = {list(anchor.artefacts)!r}
        OUTPUTS = {outputs!r}


        def test_app_holds_only_the_packed_inputs():
            packed = sorted(p for pattern in ARTEFACTS for p in glob.glob(pattern))
            assert packed, ARTEFACTS
            present = sorted(os.path.join(d, f) for d, _, files in os.walk("/app") for f in files)
            assert present == packed, present


        def test_no_deliverable_yet():
            for path in OUTPUTS:
                assert not os.path.exists(path), path
        ''')


def inputs_section(anchor: Anchor, params: dict) -> str:
    return textwrap.dedent("""
        ## Inputs packed with {name}

        The files this task talks about under `/app` are not on disk: they were packed with {name} and
        only the packed form is in `{inbox}`:

        {describe}

        Restore the files under `/app` from it exactly as they were, file modes included, before you
        start.
        """).format(name=anchor.name, inbox=INBOX, describe=anchor.describe(params)).strip() + "\n"


# The shortest answer string the validator's leak check looks for (quality.validate.MIN_SECRET_LEN;
# generate may not import quality, so the rule is restated here and tests/test_anchors.py pins it).
MIN_SECRET_LEN = 6


def hidden_strings(truth: dict) -> set[str]:
    """The answer strings the validator forbids in the instruction and setup.sh: every leaf of the
    truth outside truth['given'], at least MIN_SECRET_LEN long (quality.validate.hidden_truth_strings)."""
    def leaves(obj):
        if isinstance(obj, dict):
            return [s for v in obj.values() for s in leaves(v)]
        if isinstance(obj, list):
            return [s for v in obj for s in leaves(v)]
        return [] if isinstance(obj, bool) or obj is None else [str(obj)]

    return {s for s in leaves({k: v for k, v in truth.items() if k != "given"}) if len(s) >= MIN_SECRET_LEN}


def apply_anchor(spec: TaskSpec, anchor: Anchor | None, rng: random.Random) -> TaskSpec:
    """The (composed) task with its inputs packed by `anchor`: setup packs /app last, every solution
    unpacks first, the initial test sees only the packed form, and the instruction says how to
    undo it. The family's final test is untouched: it grades the deliverable, which the inputs decide."""
    if anchor is None:
        return spec
    params = anchor.params(rng)
    packing = _python(_STAGE_APP, "TERMFORGE_ANCHOR_STAGE") + anchor.pack(params) + f"rm -rf {STAGING}\n"
    setup = with_packing_step(spec.setup_sh, packing)
    before = anchor.unpack(params) + f"rm -rf {STAGING}\n"

    def unpacking_first(solution: str) -> str:
        return bash_script(before + "cat > /tmp/termforge-anchored-solve.sh <<'TERMFORGE_ANCHORED_SOLVE'\n"
                           + solution.rstrip("\n") + "\nTERMFORGE_ANCHORED_SOLVE\n"
                           "bash /tmp/termforge-anchored-solve.sh\nrm -f /tmp/termforge-anchored-solve.sh\n")

    apt = tuple(sorted(set(spec.apt_packages) | set(anchor.apt_packages)))
    section = inputs_section(anchor, params)
    # What the anchor adds to what the agent and the image see must not spell an answer by chance
    # (a table or branch name equal to a label the task hides): such a draw is refused, and the
    # generator retries with a derived seed (procedural.build_task).
    if clash := sorted(s for s in hidden_strings(spec.truth) if s in packing + section):
        raise ValueError(f"{anchor.name}: the packed form's text would show a hidden answer ({clash[0][:40]!r})")
    instruction = spec.instruction.rstrip("\n") + "\n\n" + section
    return replace(spec, setup_sh=setup, solve_sh=unpacking_first(spec.solve_sh),
                   alternatives={k: unpacking_first(v) for k, v in spec.alternatives.items()},
                   instruction=instruction, test_initial=_initial_test(anchor, list(spec.output_paths)),
                   apt_packages=apt)
