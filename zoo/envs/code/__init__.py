"""The code family: envs answered with Python, scored by hidden tests in the sandbox
(``code_envs``: the machinery they share; ``humaneval``, ``mbpp``, ``pyfunc``; their
multi-turn variants with execution feedback, ``code_feedback``). A family imports the
contract room (``zoo.envs.base``, ``episode``, ``prompt_format``, ``answers``), the
execution room (``zoo.envs.execution``) and the data room (``zoo.envs.data``), never a
sibling family (``zoo.envs.math``, ``zoo.envs.tool``)."""
