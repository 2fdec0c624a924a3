"""The execution room: running model-written code in isolation. ``sandbox`` (one isolated
execution, ``SandboxPool``), ``verdict`` and ``plain_calls`` (hidden tests in a second
sandbox calling the candidate over a pipe of plain data), ``pool`` (the sandbox pools a
process shares, ``require_sandbox``). It may import the contract room (``zoo.envs.base``,
``episode``, ``prompt_format``, ``answers``) and ``zoo.core``, never an env family
(``zoo.envs.math``, ``zoo.envs.code``, ``zoo.envs.tool``); the families import it."""
