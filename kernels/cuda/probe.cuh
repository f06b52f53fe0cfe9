// The signature probe: appended to a CUDA C source, with one `extern "C" __constant__` per
// kernel set from `gpubuf_sig_probe::sig<decltype(kernel)>`, it makes the compiler write
// into the PTX which parameters are declared as pointers (PTX keeps sizes only). Used by
// gpubuf-cuda's nvrtc.rs for user programs and by xtask/cudagen.py for the embedded
// kernels that user-kernel launches take (the demo stencil).
namespace gpubuf_sig_probe {
template <typename T> struct is_ptr { static constexpr unsigned long long v = 0; };
template <typename T> struct is_ptr<T*> { static constexpr unsigned long long v = 1; };
template <unsigned S, unsigned I, typename... A> struct word { static constexpr unsigned long long v = 0; };
template <unsigned S, unsigned I, typename H, typename... T> struct word<S, I, H, T...> {
    static constexpr unsigned long long v =
        ((I >= S && I - S < 64) ? (is_ptr<H>::v << ((I - S) & 63)) : 0ull) | word<S, I + 1, T...>::v;
};
template <typename F> struct sig;
template <typename... A> struct sig<void(A...)> {
    static constexpr unsigned long long n = sizeof...(A);
    template <unsigned S> struct at { static constexpr unsigned long long v = word<S, 0, A...>::v; };
};
#if __cplusplus >= 201703L
template <typename... A> struct sig<void(A...) noexcept> : sig<void(A...)> {};
#endif
}
