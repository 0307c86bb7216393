// POST /api/v1/payments: create a payment, protected by the idempotency store (transactional mode).
import { onlyPost } from '@/app/_lib/method-not-allowed';
import { runtime } from '@/app/_lib/runtime';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function post(request: Request): Promise<Response> {
  return (await runtime()).demo.payments(request);
}

export const { GET, PUT, PATCH, DELETE } = onlyPost();

export const POST = handled('/api/v1/payments', post);
