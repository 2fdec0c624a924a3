"""The tool family: multi-turn envs whose turns call a tool or an outside environment
(``tool_arithmetic``: a calculator run in the sandbox; ``openenv_env``: any OpenEnv
server). A family imports the contract room (``zoo.envs.base``, ``episode``,
``prompt_format``, ``answers``), the execution room (``zoo.envs.execution``) and the data
room (``zoo.envs.data``), never a sibling family (``zoo.envs.math``, ``zoo.envs.code``)."""
