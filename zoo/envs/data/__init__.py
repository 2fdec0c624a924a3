"""The data room: data-set loading shared by env families (``loading``: local files, the
Hugging Face Hub, the offline cache, and the error that says where it looked). It may
import the contract room (``zoo.envs.base``, ``episode``, ``prompt_format``, ``answers``)
and ``zoo.core``, never an env family (``zoo.envs.math``, ``zoo.envs.code``,
``zoo.envs.tool``); the families import it."""
