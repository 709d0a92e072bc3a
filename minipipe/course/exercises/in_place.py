"""What a tensor changed in place by exercise 11's f or g breaks, by which tensor it was (the keys
tensor_parallel.run_rank notes), in the learner's language: said when a check finds one."""

from __future__ import annotations

from ..i18n.messages import say as _


def why_not_in_place() -> dict[str, str]:
    """What each tensor f or g changed in place breaks, in the learner's language (said when asked)."""
    return {
        "f's input": _(
            "f's forward changed its input x in place. The caller still holds x (here, the block's input "
            "itself), and autograd believes it unchanged: a Function that changes an input must say so "
            "(ctx.mark_dirty). f's forward is the identity: return x.view_as(x)."
        ),
        "g's input": _(
            "g's forward all-reduced its input in place: the partial product it was given now holds the sum "
            "over the ranks. The caller still holds that tensor, and autograd believes it unchanged (a Function "
            "that changes an input must say so, with ctx.mark_dirty): had the layer before g saved its output for "
            "its backward, as a ReLU does, that backward would read the sum. All-reduce a copy: "
            "x = x.clone(), then dist.all_reduce(x, group=group)."
        ),
        "the gradient handed to f's backward": _(
            "f's backward all-reduced the gradient it was handed, in place. That "
            "buffer is autograd's: where a tensor feeds several layers, the same gradient buffer is handed to "
            "each of their backwards, and the others would then read the sum. All-reduce a copy: "
            "grad = grad.clone(), then dist.all_reduce(grad, group=ctx.group)."
        ),
        "the gradient handed to g's backward": _(
            "g's backward changed the gradient it was handed, in place. That buffer is "
            "autograd's, and may be handed to other backwards too; g's backward is the identity: return grad, "
            "None."
        ),
    }
