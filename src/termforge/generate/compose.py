"""Compose a family's task with the fixture kind and verifier kind a signature asks for.

A family offers its own kinds; `plan()` decides, for a signature, which requested kinds the
family meets natively and which a strategy adds: a container (termforge.generate.bundles) for a
fixture kind, a verifier strategy (termforge.generate.verifier_kinds) for a verifier kind. A kind
neither can give stays the family's own, and task.json records the mismatch. `compose()` turns
the family's spec into the composed one: setup packs the inputs into the container, the oracle
unpacks them first and writes the strategy's program, the instruction says how the inputs arrive
and what else to deliver, and the final test gains the strategy's tests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from termforge.generate.base import TaskFamily, TaskSpec, bash_script, complexity_level, pytest_module
from termforge.generate.bundles import CONTAINERS, Container, inputs_section, oracle_step, setup_step
from termforge.generate.honour import intrinsic_kind
from termforge.generate.verifier_kinds import STRATEGIES, VerifierStrategy
from termforge.schemas import with_packing_step


@dataclass(frozen=True)
class Plan:
    verifier_kind: str
    fixture_kind: str
    container: Container | None = None
    strategy: VerifierStrategy | None = None

    @property
    def composed(self) -> bool:
        return self.container is not None or self.strategy is not None


def plan(sig: dict, fam: TaskFamily) -> Plan:
    """The kinds the family's task will really have for this signature, and the strategies that add them."""
    want_fk, want_vk = sig.get("fixture_kind"), sig.get("verifier_kind")
    fixture_kind = want_fk if want_fk in fam.fixture_kinds or want_fk in CONTAINERS else fam.fixture_kinds[0]
    container = CONTAINERS[want_fk] if want_fk in CONTAINERS and want_fk not in fam.fixture_kinds else None
    if want_vk in fam.verifier_kinds or want_vk not in STRATEGIES:
        return Plan(want_vk if want_vk in fam.verifier_kinds else fam.verifier_kinds[0], fixture_kind, container)
    strategy = STRATEGIES[want_vk]
    if strategy.needs_container:
        if fixture_kind not in CONTAINERS:  # text_only: there is no container to decode
            return Plan(fam.verifier_kinds[0], fixture_kind, container)
        # The family's own input is already of this kind: the decoder still needs a bundle to read.
        container = container or CONTAINERS[fixture_kind]
    elif not fam.output_files:
        return Plan(fam.verifier_kinds[0], fixture_kind, container)
    return Plan(want_vk, fixture_kind, container, strategy)


def offered(sig: dict, fam: TaskFamily) -> dict[str, bool]:
    """Shape axis -> whether the family's (composed) task honours the signature on it. A verifier
    kind is honoured only by the family's own final test (intrinsic_kind): a strategy's program
    beside the task grades the agent's extra program, not the family's deliverable."""
    p = plan(sig, fam)
    return {"domain": sig.get("domain") in fam.domains, "verifier_kind": intrinsic_kind(sig, fam),
            "fixture_kind": p.fixture_kind == sig.get("fixture_kind")}


def _family_solve(solve_sh: str) -> str:
    return f"cat > /tmp/termforge-family-solve.sh <<'TERMFORGE_FAMILY_SOLVE'\n{solve_sh}TERMFORGE_FAMILY_SOLVE\n" \
           "bash /tmp/termforge-family-solve.sh\nrm -f /tmp/termforge-family-solve.sh\n"


def _initial_test(container: Container | None, outputs: list[str], family_initial: str) -> str:
    if container is None:
        return family_initial
    return pytest_module(f'''
        import os

        CONTAINER = {container.path!r}
        OUTPUTS = {outputs!r}


        def test_the_bundle_container_is_there():
            assert os.path.exists(CONTAINER)


        def test_no_deliverable_yet():
            for path in OUTPUTS:
                assert not os.path.exists(path), path
        ''')


def compose(spec: TaskSpec, p: Plan, sig: dict, rng: random.Random) -> TaskSpec:
    """The family's spec with the plan's container and verifier strategy applied."""
    if not p.composed:
        return spec
    level = complexity_level(sig)
    container, strategy = p.container, p.strategy
    params = container.params(rng, level) if container else None
    setup, before, after, instruction = spec.setup_sh, "", "", spec.instruction
    outputs = list(spec.output_paths)
    test_final, test_data = spec.test_final, spec.test_data
    if container:
        setup = with_packing_step(setup, setup_step(container, params))
        before = oracle_step(container)
        instruction = instruction.rstrip("\n") + "\n\n" + inputs_section(container, params, level)
    if strategy:
        if why := strategy.applies(outputs):
            raise ValueError(f"{strategy.kind}: {why}")
        after = strategy.oracle(container, list(spec.output_paths))
        instruction = (instruction.rstrip("\n") + "\n\n## Also deliver\n\n- "
                       + strategy.deliverable(container, params) + "\n")
        final = strategy.final_tests(container, params, list(spec.output_paths), rng, level)
        test_final = test_final.rstrip("\n") + "\n\n" + final.source.strip("\n") + "\n"
        test_data = {**test_data, **final.data}
        outputs.append(strategy.tool)
    # Every solution, the oracle and each second solution alike, meets the same composed task: it
    # unpacks the container first and delivers the strategy's program after the family's work.
    def wrapped(family_sh: str) -> str:
        return bash_script(before + _family_solve(family_sh) + after)

    return replace(spec, setup_sh=setup, solve_sh=wrapped(spec.solve_sh),
                   alternatives={name: wrapped(sh) for name, sh in spec.alternatives.items()},
                   instruction=instruction,
                   test_initial=_initial_test(container, outputs, spec.test_initial), test_final=test_final,
                   test_data=test_data,
                   output_paths=outputs, verifier_kind=p.verifier_kind, fixture_kind=p.fixture_kind)
