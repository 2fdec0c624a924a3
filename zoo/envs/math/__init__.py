"""The math family: envs answered with a number or an expression (``arithmetic``,
``running_sum``, the reasoning-gym tasks, ``gsm8k`` and ``math`` with their math-verify
grading). A family imports the contract room (``zoo.envs.base``, ``episode``,
``prompt_format``, ``answers``), the execution room (``zoo.envs.execution``) and the data
room (``zoo.envs.data``), never a sibling family (``zoo.envs.code``, ``zoo.envs.tool``)."""
