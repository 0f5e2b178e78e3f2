#!/usr/bin/env perl
# cuda-emu-translate.pl FILE.cu — prints FILE.cu as C++ for the CUDA emulator (tests/cuda_emu):
# every kernel launch
#     kernel<<<grid, block, smem, stream>>>(args)
# becomes
#     ::cuda_emu::launch("kernel", [](auto... a_) { kernel(a_...); }, grid, block, smem, stream)(args)
# (a lambda, so template kernels still deduce their arguments). Nothing else changes; a #line
# directive keeps compiler messages pointing at the .cu file.
use strict;
use warnings;
my $file = shift or die "usage: cuda-emu-translate.pl FILE.cu\n";
open(my $in, '<', $file) or die "$file: $!\n";
local $/;
my $src = <$in>;
close $in;
my $n = ($src =~ s{\b([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:<[^<>;(){}]*>)?)\s*<<<(.*?)>>>\s*\(}
                  {::cuda_emu::launch("$1", [](auto... a_) { $1(a_...); }, $2)(}gs);
die "$file: a '<<<' left untranslated\n" if $src =~ /<<</;
print "#line 1 \"$file\"\n", $src;
print STDERR "cuda-emu-translate: $file: $n launches\n" if $ENV{VERBOSE};
